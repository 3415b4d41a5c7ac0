#!/usr/bin/env python3
"""Reference logits from the numpy forward pass (``numpy_llama.py``), and comparisons between logit files.

What: for every prompt of ``tests/golden/llama_prompts.json`` computes the logits at the last position and
at the prompt's listed ``positions``, in float64 by default, and greedy-decodes the France prompts for 16
tokens; writes ``numpy_logits.safetensors`` (f32 ``[vocab]`` tensors ``<prompt_id>.last`` /
``<prompt_id>.pos<N>``, the same names as ``llama_logits.safetensors``) and ``numpy_logits_meta.json``.
``--compare A B`` prints, per tensor present in both files, the max absolute difference and whether the
top-1 ids agree, without running any model.
Needs: numpy, ``gguf``, ``safetensors`` (``tests/reference/venv.sh`` provides them). CPU only, a few minutes.
Run:   PY="$(tests/reference/venv.sh)"
       "$PY" tests/reference/numpy_golden.py --out tests/golden [--dtype f64|f32] [--gguf PATH]
       "$PY" tests/reference/numpy_golden.py --compare tests/golden/llama_logits.safetensors tests/golden/numpy_logits.safetensors
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np
from gguf import GGUFReader
from safetensors.numpy import load_file, save_file

from gguf_text import GgufDetokenizer
from numpy_llama import NumpyLlama
from smollm2_gguf import ROOT, gguf_path

GREEDY_PROMPTS = ("france_chatml", "france_chatml_no_system")
GREEDY_TOKENS = 16
TOP_K = 10


def prompt_rows(model: NumpyLlama, prompt: dict) -> dict[str, np.ndarray]:
    """Named logits rows of one prompt: ``<id>.last`` and ``<id>.pos<N>`` for its listed positions."""
    ids = prompt["ids"]
    named = [("last", len(ids) - 1)] + [(f"pos{p}", p) for p in prompt.get("positions", [])]
    rows = model.logits(ids, [p for _, p in named])
    return {f"{prompt['id']}.{suffix}": row for (suffix, _), row in zip(named, rows)}


def top_k(row: np.ndarray) -> dict:
    """Top-k ids and values of one logits row, best first."""
    order = np.argsort(-row, kind="stable")[:TOP_K]
    return {"top_ids": [int(i) for i in order], "top_values": [float(row[i]) for i in order]}


def greedy(model: NumpyLlama, ids: list[int], steps: int) -> list[int]:
    """Greedy continuation (full recomputation each step), not stopping at end-of-sequence."""
    seq = list(ids)
    for _ in range(steps):
        seq.append(int(model.logits(seq, [len(seq) - 1])[0].argmax()))
    return seq[len(ids) :]


def write(model: NumpyLlama, reader: GGUFReader, prompts: list[dict], out: Path, dtype: str) -> None:
    """Compute and write ``numpy_logits.safetensors`` and ``numpy_logits_meta.json`` into ``out``."""
    tensors, per_tensor = {}, {}
    for prompt in prompts:
        for name, row in prompt_rows(model, prompt).items():
            tensors[name] = np.ascontiguousarray(row, dtype=np.float32)
            per_tensor[name] = {"prompt_id": prompt["id"], "n_tokens": prompt["n_tokens"], **top_k(row)}
        print(f"{prompt['id']}: {prompt['n_tokens']} tokens", flush=True)
    detok = GgufDetokenizer(reader)
    decoded = {}
    for prompt in (p for p in prompts if p["id"] in GREEDY_PROMPTS):
        ids = greedy(model, prompt["ids"], GREEDY_TOKENS)
        decoded[prompt["id"]] = {"new_tokens": GREEDY_TOKENS, "ids": ids, "text": detok.decode(ids)}
        print(f"greedy {prompt['id']}: {ids} -> {decoded[prompt['id']]['text']!r}", flush=True)
    meta = {
        "source": "tests/reference/numpy_llama.py (numpy, GGUF layout, gguf dequantisation)",
        "compute_dtype": dtype,
        "versions": {"numpy": np.__version__, "gguf": version("gguf"), "python": sys.version.split()[0]},
        "tensors": per_tensor,
        "greedy": decoded,
    }
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "numpy_logits.safetensors"), metadata={"source": "numpy", "dtype": dtype})
    (out / "numpy_logits_meta.json").write_text(json.dumps(meta, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {len(tensors)} tensors to {out / 'numpy_logits.safetensors'}")


def compare(first: Path, second: Path) -> float:
    """Print per-tensor max |difference| and top-1 agreement of two logit files; return the worst diff."""
    a, b = load_file(str(first)), load_file(str(second))
    worst = 0.0
    for name in sorted(set(a) & set(b)):
        diff = float(np.abs(a[name] - b[name]).max())
        worst = max(worst, diff)
        same = "same top-1" if a[name].argmax() == b[name].argmax() else "TOP-1 DIFFERS"
        print(f"{name:<34} max|diff| {diff:.2e}  {same}")
    print(f"{len(set(a) & set(b))} tensors compared, worst max|diff| {worst:.2e}")
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, default=None, help="GGUF file (default: fetched into .cache/)")
    parser.add_argument("--prompts", type=Path, default=ROOT / "tests" / "golden" / "llama_prompts.json")
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "golden", help="output directory")
    parser.add_argument("--dtype", choices=("f64", "f32"), default="f64", help="compute precision")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"), help="compare two logit files")
    args = parser.parse_args()
    if args.compare:
        compare(*args.compare)
        return
    reader = GGUFReader(args.gguf or gguf_path())
    model = NumpyLlama(reader, np.float64 if args.dtype == "f64" else np.float32)
    prompts = json.loads(args.prompts.read_text(encoding="utf-8"))["prompts"]
    write(model, reader, prompts, args.out, args.dtype)


if __name__ == "__main__":
    main()
