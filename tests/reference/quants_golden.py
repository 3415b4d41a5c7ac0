#!/usr/bin/env python3
"""Blocks of every quantised GGUF type docqa dequantises, beside gguf-py's dequantisation of them, so that
engine/tests/gguf_quants.rs can check docqa's against an independent reader bit for bit.

What it writes: tests/golden/gguf_quants/blocks.gguf holding, for each type T of TYPES,
  q.T  3 rows of 512 weights as T's blocks: random bytes, but for the f16 scales (`d`, and `dmin`/`m` where
       the type has one), which are drawn finite: magnitudes from 1e-3 to 0.1 of either sign, and in the
       last block of each row a subnormal (3e-6), zero, or the largest f16 below 1 (0.99951);
  f.T  the same shape as F32: gguf.quants.dequantize of q.T.
and meta.json with the versions used.

Needs: gguf, numpy (tests/reference/venv.sh). Run from anywhere:
  "$(tests/reference/venv.sh)" tests/reference/quants_golden.py
Deterministic: the same seed and versions give the same bytes.
"""

import importlib.metadata
import json
import sys
from pathlib import Path

import gguf
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gguf_write  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests/golden/gguf_quants"
ROWS, COLS = 3, 512
Q = gguf.GGMLQuantizationType

# type: byte offsets of its f16 scales within a block
TYPES = {
    Q.Q4_0: [0],
    Q.Q4_1: [0, 2],
    Q.Q5_0: [0],
    Q.Q5_1: [0, 2],
    Q.Q8_0: [0],
    Q.IQ4_NL: [0],
    Q.Q2_K: [80, 82],
    Q.Q3_K: [108],
    Q.Q4_K: [0, 2],
    Q.Q5_K: [0, 2],
    Q.Q6_K: [208],
    Q.IQ4_XS: [0],
}
EDGE_SCALES = [3e-6, 0.0, 0.99951]


def blocks_of(qtype: Q, rng: np.random.Generator) -> np.ndarray:
    """ROWS rows of random blocks of `qtype` with finite f16 scales, as uint8 [ROWS, bytes a row]."""
    block_len, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    per_row = COLS // block_len
    blocks = rng.integers(0, 256, size=(ROWS, per_row, block_bytes), dtype=np.uint8)
    for row in range(ROWS):
        for b in range(per_row):
            for at in TYPES[qtype]:
                if b == per_row - 1:
                    value = EDGE_SCALES[(row + at) % len(EDGE_SCALES)]
                else:
                    value = rng.choice([-1, 1]) * 10 ** rng.uniform(-3, -1)
                blocks[row, b, at : at + 2] = np.array([value], dtype="<f2").view(np.uint8)
    return blocks.reshape(ROWS, per_row * block_bytes)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20261207)
    writer = gguf.GGUFWriter(OUT / "blocks.gguf", "llama")
    for qtype in TYPES:
        raw = blocks_of(qtype, rng)
        expected = gguf.quants.dequantize(raw, qtype).astype(np.float32)
        assert expected.shape == (ROWS, COLS) and np.isfinite(expected).all(), qtype.name
        writer.add_tensor(f"q.{qtype.name}", raw, raw_dtype=qtype)
        writer.add_tensor(f"f.{qtype.name}", expected)
    gguf_write.finish(writer)
    (OUT / "meta.json").write_text(
        json.dumps({"gguf": importlib.metadata.version("gguf"), "numpy": np.__version__,
                    "types": [t.name for t in TYPES], "rows": ROWS, "cols": COLS}, indent=2) + "\n")
    print(f"wrote {OUT / 'blocks.gguf'}")


if __name__ == "__main__":
    main()
