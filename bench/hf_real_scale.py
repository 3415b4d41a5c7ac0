"""HF transformers anchors for docqa's real-scale timings (BENCHMARKS.md, "Real scale"), on the same random
weights, plus the GPU's measured copy bandwidth (the decode ceiling).

`docqa models synth --shape NAME --out DIR` writes the checkpoint; this script loads DIR with
`AutoModelForCausalLM` (bf16, SDPA attention, on the GPU) and times, at batch 1:
- prefill of each length in --lengths: one forward pass over random token ids, logits of the last position
  only, best of two after a warm-up pass;
- decode: greedy `generate` of 128 new tokens (`min_new_tokens` keeps it going) after an 8,192-token prompt,
  the prefill's time subtracted;
and, once, a device-to-device copy of 4 GiB (read + write bytes over time, best of five).

Run on the GPU machine: python3 bench/hf_real_scale.py DIR [--lengths 8192,32768] [--json OUT]
"""

import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM

NEW = 128
DECODE_PROMPT = 8192


def timed(fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def copy_bandwidth() -> float:
    """Bytes read and written per second by a 4 GiB device-to-device copy, best of five."""
    src = torch.empty(1 << 31, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = min(timed(lambda: dst.copy_(src)) for _ in range(5))
    return 2 * src.numel() * src.element_size() / best


@torch.no_grad()
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--lengths", default="8192,32768")
    ap.add_argument("--json")
    args = ap.parse_args()
    model = AutoModelForCausalLM.from_pretrained(
        args.model_dir, dtype=torch.bfloat16, attn_implementation="sdpa", device_map="cuda"
    ).eval()
    vocab = model.config.vocab_size
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    out = {"model": args.model_dir, "weight_bytes": weight_bytes, "copy_bytes_per_s": copy_bandwidth()}
    g = torch.Generator(device="cuda").manual_seed(1)

    def ids(n):
        return torch.randint(3, vocab, (1, n), device="cuda", generator=g)

    model(input_ids=ids(512), logits_to_keep=1)
    prefill = {}
    for n in [int(x) for x in args.lengths.split(",")]:
        x = ids(n)

        def forward(x=x):
            model(input_ids=x, logits_to_keep=1, use_cache=False)

        try:
            best = min(timed(forward) for _ in range(2))
            prefill[n] = {"seconds": best, "tokens_per_s": n / best}
        except torch.OutOfMemoryError as e:
            prefill[n] = {"error": str(e).splitlines()[0]}
        torch.cuda.empty_cache()
        print(f"prefill {n:>6}: {prefill[n]}", flush=True)
    out["prefill"] = prefill
    x = ids(DECODE_PROMPT)
    first = min(timed(lambda: model(input_ids=x, logits_to_keep=1)) for _ in range(2))
    total = timed(lambda: model.generate(x, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False))
    out["decode"] = {"context": DECODE_PROMPT, "new_tokens": NEW, "tokens_per_s": (NEW - 1) / (total - first)}
    print(f"decode after {DECODE_PROMPT}: {out['decode']['tokens_per_s']:.1f} tok/s", flush=True)
    print(f"copy bandwidth: {out['copy_bytes_per_s'] / 1e12:.2f} TB/s; weights {weight_bytes / 1e9:.2f} GB", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
