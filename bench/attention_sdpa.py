"""PyTorch anchors for gpu-check's attention timings, same shapes and FLOP/byte counts.

Prefill: causal SDPA, bf16, 32 heads, one sequence of N tokens, head_dim 64 and 128, on the FlashAttention
and cuDNN backends. Decode: 8 sequences, one query each, 32 query heads over 8 KV heads (enable_gqa),
head_dim 128; and one sequence at 8K, 32K and 131K (gpu-check's batch-1 rows). Last, the device's
copy bandwidth (a 4 GiB device-to-device copy, read + write bytes over time, best of five), the
ceiling decode is measured against. Times are CUDA events, median of several runs after a warm-up;
inputs are random.

Run on the GPU machine: python3 bench/attention_sdpa.py [prefill] [decode] [decode_one] [copy]
(every anchor when none is named).
"""

import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def prefill():
    print("anchor: SDPA prefill, causal, bf16, 32 heads, one sequence")
    for hd in (64, 128):
        for n in (1024, 2048, 4096, 8192, 16384, 32768, 65536):
            q, k, v = (torch.randn(1, 32, n, hd, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            flops = 4 * 32 * hd * n * (n + 1) / 2
            for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                try:
                    with sdpa_kernel(backend):
                        ms = median_ms(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, is_causal=True), 7)
                    print(f"  head_dim {hd:>3}  N {n:>6}  {name:<5} {ms:>9.3f} ms  {flops / ms * 1e-9:>7.2f} TFLOP/s")
                except RuntimeError as e:
                    print(f"  head_dim {hd:>3}  N {n:>6}  {name:<5} unavailable: {str(e).splitlines()[0]}")


def decode():
    print("anchor: SDPA decode, 8 sequences, 1 query, 32/8 heads (GQA), head_dim 128, bf16")
    for ctx in (4096, 8192, 16384, 32768, 65536, 131072):
        q = torch.randn(8, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(8, 8, ctx, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        ms = median_ms(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), 11)
        nbytes = 8 * ctx * 8 * 128 * 2 * 2
        print(f"  ctx {ctx:>6}  {ms:>9.3f} ms  {nbytes / ms * 1e-9:>7.3f} TB/s")


def decode_one():
    print("anchor: SDPA decode, 1 sequence, 1 query, 32/8 heads (GQA), head_dim 128, bf16")
    for ctx in (8192, 32768, 131072):
        q = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(1, 8, ctx, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    ms = median_ms(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), 21)
                nbytes = ctx * 8 * 128 * 2 * 2
                print(f"  ctx {ctx:>6}  {name:<5} {ms * 1e3:>8.1f} us  {nbytes / ms * 1e-9:>7.3f} TB/s")
            except RuntimeError as e:
                print(f"  ctx {ctx:>6}  {name:<5} unavailable: {str(e).splitlines()[0]}")


def copy_bandwidth():
    src = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = min(median_ms(lambda: dst.copy_(src), 1) for _ in range(5))
    print(f"anchor: device-to-device copy of 4 GiB: {2 * src.numel() / best * 1e-9:.2f} TB/s (read + write)")


if __name__ == "__main__":
    # Anchors to time: every one by default, or those named (prefill, decode, decode_one, copy).
    anchors = {"prefill": prefill, "decode": decode, "decode_one": decode_one, "copy": copy_bandwidth}
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for name in sys.argv[1:] or list(anchors):
        anchors[name]()
