"""How fast can any bf16 prefill of a decoder be, built on NVIDIA's own kernels? A bound for the prefill
ratios in BENCHMARKS.md ("≥ 1.3× HF transformers").

For each model shape and prompt length N this times, on the GPU it runs on, the parts of one prefill that
cost all but a few percent of its time:
- the four products of a layer (q/k/v, o, gate/up, down) as `torch.nn.functional.linear` in bf16, which
  runs cuBLAS, at M = N rows;
- causal attention over N tokens at the shape's query heads and head_dim, as SDPA's FlashAttention-2 and
  cuDNN backends (K and V expanded to the query heads; the FLOPs are the same), the faster of the two;
and sums them over the layers. The sum leaves out every other kernel (norms, RoPE, SwiGLU, the KV write,
the embedding, the LM head of the last token), every gap between kernels and every loss of clock under
sustained load, so no implementation that uses these kernels can prefill faster. Given HF transformers'
time for the same prefill (bench/hf_real_scale.py, bench/hf_generate.py), HF / bound is the largest
speed-up over HF that such an implementation can reach. Times are CUDA events, the median of several runs
after a warm-up (`median_ms` of bench/attention_sdpa.py), on random inputs.

Run on the GPU machine: python3 bench/prefill_bound.py [SHAPE:N,N ...]
(default: smollm2-135m:8192 llama-3.2-1b:8192,32768 llama-3.1-8b:8192,32768 qwen2.5-7b:8192,32768)
"""

import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from attention_sdpa import median_ms

# hidden, intermediate, query heads, KV heads, head_dim, layers: the published configs' values.
SHAPES = {
    "smollm2-135m": (576, 1536, 9, 3, 64, 30),
    "llama-3.2-1b": (2048, 8192, 32, 8, 64, 16),
    "llama-3.1-8b": (4096, 14336, 32, 8, 128, 32),
    "qwen2.5-7b": (3584, 18944, 28, 4, 128, 28),
}
DEFAULT = ["smollm2-135m:8192", "llama-3.2-1b:8192,32768", "llama-3.1-8b:8192,32768", "qwen2.5-7b:8192,32768"]


def products_ms(n, hidden, inter, heads, kv_heads, head_dim):
    """Milliseconds of each of a layer's four products at n rows, by name, with their FLOPs."""
    q_width, kv_width = heads * head_dim, kv_heads * head_dim
    shapes = {"q/k/v": (hidden, q_width + 2 * kv_width), "o": (q_width, hidden),
              "gate/up": (hidden, 2 * inter), "down": (inter, hidden)}
    out = {}
    for name, (k, m) in shapes.items():
        x = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        out[name] = (median_ms(lambda x=x, w=w: F.linear(x, w), 7), 2.0 * n * k * m)
        del x, w
    return out


def attention_ms(n, heads, head_dim):
    """The faster of SDPA's FlashAttention-2 and cuDNN backends, causal, one sequence: (ms, backend)."""
    q, k, v = (torch.randn(1, heads, n, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    best = None
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), 7)
        except RuntimeError:
            continue
        if best is None or ms < best[0]:
            best = (ms, name)
    return best


def bound(shape, n):
    hidden, inter, heads, kv_heads, head_dim, layers = SHAPES[shape]
    products = products_ms(n, hidden, inter, heads, kv_heads, head_dim)
    attn_ms, backend = attention_ms(n, heads, head_dim)
    attn_flops = 4.0 * heads * head_dim * n * (n + 1) / 2
    layer_ms = sum(ms for ms, _ in products.values()) + attn_ms
    parts = "  ".join(
        f"{name} {ms:.3f} ms ({flops / ms * 1e-9:.0f} TFLOP/s)" for name, (ms, flops) in products.items()
    )
    attn = f"{attn_ms:.3f} ms ({attn_flops / attn_ms * 1e-9:.0f} TFLOP/s, {backend})"
    print(f"{shape} N {n}: per layer {parts}  attention {attn}")
    print(f"{shape} N {n}: bound {layers} x {layer_ms:.3f} ms = {layers * layer_ms:.1f} ms", flush=True)


if __name__ == "__main__":
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for arg in sys.argv[1:] or DEFAULT:
        shape, lengths = arg.split(":")
        for n in lengths.split(","):
            bound(shape, int(n))
            torch.cuda.empty_cache()
