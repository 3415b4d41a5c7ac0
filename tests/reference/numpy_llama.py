#!/usr/bin/env python3
"""A second, independent reference forward pass of SmolLM2-135M-Instruct, in numpy, from the GGUF.

What: dequantises every tensor with the ``gguf`` package and runs the Llama decoder in the GGUF's own
layout: Q/K rows stay as llama.cpp stores them and RoPE rotates adjacent pairs (2i, 2i+1), which is the
rotation that layout is permuted for, so nothing is un-permuted. It shares no code with transformers or
with docqa, so agreement between it and ``logits_golden.py`` checks both.
Uses: prints top-5 next tokens and the greedy continuation of the France prompt of ``llama_prompts.json``;
with ``--check FILE.safetensors`` it compares its logits with the recorded ones (max abs difference).
Needs: numpy, ``gguf``, ``safetensors`` (``tests/reference/venv.sh`` provides them). CPU only.
Run:   "$(tests/reference/venv.sh)" tests/reference/numpy_llama.py [--gguf PATH] [--check tests/golden/llama_logits.safetensors]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

from gguf_text import GgufDetokenizer
from smollm2_gguf import ROOT, gguf_path


class NumpyLlama:
    """Llama decoder over dequantised GGUF tensors (full recomputation, no KV cache)."""

    def __init__(self, reader: GGUFReader, dtype=np.float32):
        self.dtype = dtype
        meta = {name: reader.fields[name].contents() for name in reader.fields if name.startswith("llama.")}
        self.n_layers = int(meta["llama.block_count"])
        self.n_heads = int(meta["llama.attention.head_count"])
        self.n_kv_heads = int(meta["llama.attention.head_count_kv"])
        self.head_dim = int(meta["llama.embedding_length"]) // self.n_heads
        self.theta = float(meta["llama.rope.freq_base"])
        self.eps = float(meta["llama.attention.layer_norm_rms_epsilon"])
        self.w = {t.name: self._tensor(t) for t in reader.tensors}

    def _tensor(self, tensor) -> np.ndarray:
        """Dequantised tensor in numpy order (a matrix is [rows = outputs, columns = inputs])."""
        shape = tuple(int(d) for d in reversed(tensor.shape))
        return dequantize(tensor.data, tensor.tensor_type).reshape(shape).astype(self.dtype)

    def _rms_norm(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * weight

    def _rope(self, x: np.ndarray) -> np.ndarray:
        """Rotate adjacent pairs of each head: x [n, heads, head_dim]."""
        n = x.shape[0]
        inv = self.theta ** (-np.arange(0, self.head_dim, 2, dtype=np.float64) / self.head_dim)
        angle = np.arange(n, dtype=np.float64)[:, None] * inv[None, :]
        cos, sin = np.cos(angle)[:, None, :].astype(self.dtype), np.sin(angle)[:, None, :].astype(self.dtype)
        even, odd = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = even * cos - odd * sin
        out[..., 1::2] = even * sin + odd * cos
        return out

    def _attention(self, h: np.ndarray, layer: str) -> np.ndarray:
        n, hd = h.shape[0], self.head_dim
        q = self._rope((h @ self.w[f"{layer}.attn_q.weight"].T).reshape(n, self.n_heads, hd))
        k = self._rope((h @ self.w[f"{layer}.attn_k.weight"].T).reshape(n, self.n_kv_heads, hd))
        v = (h @ self.w[f"{layer}.attn_v.weight"].T).reshape(n, self.n_kv_heads, hd)
        group = self.n_heads // self.n_kv_heads
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd).astype(self.dtype)
        scores = np.where(np.tril(np.ones((n, n), dtype=bool))[None], scores, -np.inf)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = scores / scores.sum(axis=-1, keepdims=True)
        out = np.einsum("hqk,khd->qhd", probs, v).reshape(n, self.n_heads * hd)
        return out @ self.w[f"{layer}.attn_output.weight"].T

    def _ffn(self, h: np.ndarray, layer: str) -> np.ndarray:
        gate = h @ self.w[f"{layer}.ffn_gate.weight"].T
        up = h @ self.w[f"{layer}.ffn_up.weight"].T
        return (gate / (1 + np.exp(-gate)) * up) @ self.w[f"{layer}.ffn_down.weight"].T

    def logits(self, ids: list[int], positions: list[int]) -> np.ndarray:
        """Logits [len(positions), vocab] of the sequence ``ids``."""
        embed = self.w["token_embd.weight"]
        x = embed[np.asarray(ids)]
        for i in range(self.n_layers):
            layer = f"blk.{i}"
            x = x + self._attention(self._rms_norm(x, self.w[f"{layer}.attn_norm.weight"]), layer)
            x = x + self._ffn(self._rms_norm(x, self.w[f"{layer}.ffn_norm.weight"]), layer)
        x = self._rms_norm(x[positions], self.w["output_norm.weight"])
        head = self.w.get("output.weight", embed)
        return (x @ head.T).astype(np.float32)


def compare(model: NumpyLlama, prompts: list[dict], golden: Path) -> None:
    """Max abs difference of our logits against each recorded tensor, and whether top-1 agrees."""
    from safetensors.numpy import load_file

    recorded = load_file(str(golden))
    by_id = {p["id"]: p for p in prompts}
    for name, want in sorted(recorded.items()):
        prompt_id, suffix = name.rsplit(".", 1)
        ids = by_id[prompt_id]["ids"]
        position = len(ids) - 1 if suffix == "last" else int(suffix[3:])
        got = model.logits(ids[: position + 1], [position])[0]
        diff = float(np.abs(got - want).max())
        print(f"{name:<32} max|diff| {diff:.2e}  top1 {int(got.argmax())} vs {int(want.argmax())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, default=None)
    parser.add_argument("--prompts", type=Path, default=ROOT / "tests" / "golden" / "llama_prompts.json")
    parser.add_argument("--check", type=Path, default=None, help="llama_logits.safetensors to compare with")
    parser.add_argument("--f64", action="store_true", help="compute in float64")
    parser.add_argument("--greedy", type=int, default=16, help="tokens to decode for the France prompt")
    args = parser.parse_args()
    reader = GGUFReader(args.gguf or gguf_path())
    model = NumpyLlama(reader, np.float64 if args.f64 else np.float32)
    detok = GgufDetokenizer(reader)
    prompts = json.loads(args.prompts.read_text(encoding="utf-8"))["prompts"]
    if args.check:
        compare(model, prompts, args.check)
        return
    for prompt in (p for p in prompts if p["n_tokens"] <= 512):
        row = model.logits(prompt["ids"], [len(prompt["ids"]) - 1])[0]
        top = np.argsort(-row)[:5]
        print(f"{prompt['id']}: top-5 {[(int(i), detok.decode([int(i)]), round(float(row[i]), 3)) for i in top]}")
    seq = list(next(p for p in prompts if p["id"] == "france_chatml")["ids"])
    start = len(seq)
    for _ in range(args.greedy):
        seq.append(int(model.logits(seq, [len(seq) - 1])[0].argmax()))
    print(f"greedy france_chatml: {seq[start:]} -> {detok.decode(seq[start:])!r}")


if __name__ == "__main__":
    main()
