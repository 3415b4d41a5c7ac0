"""Tokenise text with llama.cpp's ``llama-tokenize``: docqa's independent tokenizer reference.

Text is handed to the tool through a file (``--file``), never as a shell argument, so newlines, tabs,
leading/trailing spaces and non-ASCII survive byte for byte; ``--no-escape`` keeps backslash sequences
such as ``\\n`` literal (the tool would otherwise turn them into control characters). Special tokens
written in the text (such as ``<|im_start|>``) are parsed as specials (the tool's default); no BOS is
added (``--no-bos``). The tool is expected at ``.cache/llama.cpp/bin/llama-tokenize`` (built by
``tests/reference/build_llama_cpp.sh``) or at ``$LLAMA_TOKENIZE``.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TOOL = ROOT / ".cache" / "llama.cpp" / "bin" / "llama-tokenize"


def tool_path() -> Path:
    """Path of ``llama-tokenize`` (``$LLAMA_TOKENIZE`` overrides the built one)."""
    tool = Path(os.environ.get("LLAMA_TOKENIZE", DEFAULT_TOOL))
    if not tool.is_file():
        raise FileNotFoundError(f"{tool} not found: run tests/reference/build_llama_cpp.sh first")
    return tool


def tokenize(gguf: Path, text: str) -> list[int]:
    """Token ids of ``text`` as llama.cpp produces them (specials parsed, no BOS)."""
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as handle:
        handle.write(text.encode("utf-8"))
        text_file = handle.name
    try:
        result = subprocess.run(
            [str(tool_path()), "-m", str(gguf), "--file", text_file, "--ids", "--no-bos", "--no-escape", "--log-disable"],
            check=True,
            capture_output=True,
        )
    finally:
        os.unlink(text_file)
    return parse_ids(result.stdout.decode("utf-8", errors="replace"))


def parse_ids(stdout: str) -> list[int]:
    """Parse the ``[id, id, ...]`` line that ``llama-tokenize --ids`` prints last."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if not lines or not lines[-1].startswith("["):
        raise ValueError(f"unexpected llama-tokenize output: {stdout[-500:]!r}")
    ids = json.loads(lines[-1])
    if not all(isinstance(i, int) for i in ids):
        raise ValueError(f"non-integer ids in llama-tokenize output: {lines[-1][:200]!r}")
    return ids
