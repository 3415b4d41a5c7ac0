"""An independent reference forward pass of SmolLM2-135M-Instruct in numpy, straight from the GGUF.

Dequantises every tensor with the ``gguf`` package and runs the Llama decoder in the GGUF's own layout:
Q/K rows stay as llama.cpp stores them and RoPE rotates adjacent pairs (2i, 2i+1), which is the rotation
that layout is permuted for, so nothing is un-permuted. It shares no code with transformers or with docqa.
Full recomputation, no KV cache: slow but simple. ``numpy_golden.py`` is its command line.
"""

from __future__ import annotations

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


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
