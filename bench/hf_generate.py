"""HF transformers anchors for gpu-check's end-to-end timings, on the same random weights.

`DOCQA_BENCH_MODEL_DIR=DIR gpu-check --bench` writes the random SmolLM2-135M- and Llama-3.2-1B-shaped
checkpoints it times into DIR/<name>; this script loads each into `LlamaForCausalLM` (bf16, on the GPU,
SDPA attention) and times what gpu-check times: prefill of 2,048, 8,191 and (where the model's
positions reach) 32,767 tokens at batch 1 (best of three forward passes), and greedy `generate` of 128 new tokens after 512-token prompts at batch 1, 8 and
32 (wall clock after a 4-token warm-up call; `min_new_tokens` keeps every sequence going for all 128 steps).

Run on the GPU machine: python3 bench/hf_generate.py DIR
"""

import json
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM

PROMPT, NEW = 512, 128


def load(directory):
    config = LlamaConfig(**json.loads((directory / "config.json").read_text()))
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    missing, unexpected = model.load_state_dict(load_file(directory / "model.safetensors"), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    model.tie_weights()
    return model.eval(), config.vocab_size, config.max_position_embeddings


def timed(fn):
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def prefill(model, vocab, max_positions):
    for n in (n for n in (2048, 8191, 32767) if n < max_positions):
        ids = torch.randint(3, vocab, (1, n), device="cuda")
        best = min(timed(lambda ids=ids: model(ids, use_cache=True, logits_to_keep=1)) for _ in range(3))
        print(f"  prefill {n:>5} tokens  {best * 1e3:>8.1f} ms  {n / best:>9.0f} tok/s")


def decode(model, vocab):
    for batch in (1, 8, 32):
        ids = torch.randint(3, vocab, (batch, PROMPT), device="cuda")
        mask = torch.ones_like(ids)

        def run(new, ids=ids, mask=mask):
            model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=0,
            )

        run(4)
        secs = timed(lambda: run(NEW))
        print(
            f"  generate batch {batch:>2}, {NEW} new after {PROMPT}  {secs * 1e3 / NEW:>7.3f} ms/step"
            f"  {batch * NEW / secs:>8.0f} tok/s"
        )


def main():
    root = Path(sys.argv[1])
    print(f"anchor: HF transformers generate, torch {torch.__version__}")
    for name in ("smollm2-135m", "llama-3.2-1b"):
        model, vocab, max_positions = load(root / name)
        print(f"anchor: {name}-shaped random model, bf16, SDPA attention")
        with torch.inference_mode():
            prefill(model, vocab, max_positions)
            decode(model, vocab)
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
