"""Fine-tunes SmolLM2-135M-Instruct into docqa's reader with LoRA.

    python3 training/pipeline/train.py --model-dir MODEL_DIR --examples examples.jsonl.gz \
        --out ADAPTER_DIR [--rank 16] [--alpha 32] [--lr 4e-4] [--minutes 6] [--epochs 1]

MODEL_DIR is the base model as docqa serves it (`docqa models fetch` writes it under
~/.cache/docqa/models; `docqa models convert GGUF DIR` makes it from the GGUF), so the adapter is
trained on exactly the weights it is merged into. The loss is on the answer tokens only (the target
and the end-of-turn token). Batches hold examples of similar length, right-padded: with causal
attention the padding at the end is never seen by the tokens before it, so no attention mask is
needed and SDPA runs its fused causal kernel. The learning rate follows a warm-up and a cosine decay
over whichever runs out first, the examples or the time budget, so a run always ends with a decayed
rate. The adapter is saved in PEFT's format with bf16 tensors (`adapter_config.json`,
`adapter_model.safetensors`), plus `training.json` with the settings and the loss curve.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import random
import sys
import time
from pathlib import Path

import torch

TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
END_OF_TURN = "<|im_end|>"


def load_examples(path: Path, tokenizer, max_len: int):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    end = tokenizer.token_to_id(END_OF_TURN)
    prompts = tokenizer.encode_batch([r["prompt"] for r in rows], add_special_tokens=False)
    targets = tokenizer.encode_batch([r["target"] for r in rows], add_special_tokens=False)
    out, dropped = [], 0
    for r, p, t in zip(rows, prompts, targets):
        ids = p.ids + t.ids + [end]
        if len(ids) > max_len:
            dropped += 1
            continue
        out.append((ids, len(p.ids), r["kind"], r["source"]))
    return out, dropped


def batches(examples, tokens_per_batch: int, rng: random.Random):
    """Batches of similar length (sorted within shuffled pools), each at most `tokens_per_batch` padded."""
    order = list(range(len(examples)))
    rng.shuffle(order)
    pool = 2048
    out = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start:start + pool], key=lambda i: len(examples[i][0]))
        batch, longest = [], 0
        for i in chunk:
            n = len(examples[i][0])
            if batch and max(longest, n) * (len(batch) + 1) > tokens_per_batch:
                out.append(batch)
                batch, longest = [], 0
            batch.append(i)
            longest = max(longest, n)
        if batch:
            out.append(batch)
    rng.shuffle(out)
    return out


def collate(examples, batch, pad_id: int, device):
    longest = max(len(examples[i][0]) for i in batch)
    ids = torch.full((len(batch), longest), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), longest), -100, dtype=torch.long)
    for row, i in enumerate(batch):
        seq, prompt_len, _, _ = examples[i]
        ids[row, : len(seq)] = torch.tensor(seq)
        labels[row, prompt_len : len(seq)] = torch.tensor(seq[prompt_len:])
    return ids.to(device, non_blocking=True), labels.to(device, non_blocking=True)


def learning_rate(base: float, progress: float, step: int, warmup: int) -> float:
    if step < warmup:
        return base * (step + 1) / warmup
    return base * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def answer_loss(model, ids, labels):
    hidden = model.base_model.model.model(input_ids=ids).last_hidden_state
    mask = labels[:, 1:] != -100
    picked = hidden[:, :-1][mask]  # only the positions that predict answer tokens reach the LM head
    logits = model.base_model.model.lm_head(picked).float()
    return torch.nn.functional.cross_entropy(logits, labels[:, 1:][mask])


def pipeline_checksums() -> dict:
    """SHA-256 of this folder's sources and of the prompt texts, tying an adapter to the code that made it."""
    here = Path(__file__).resolve().parent
    files = sorted(here.glob("*.py")) + [here.parents[1] / "services" / "src" / "qa" / "prompts.json"]
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", required=True, type=Path)
    ap.add_argument("--examples", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32)
    ap.add_argument("--dropout", type=float, default=0.05)
    ap.add_argument("--lr", type=float, default=4e-4)
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--minutes", type=float, default=6.0, help="time budget of the optimisation loop")
    ap.add_argument("--tokens-per-batch", type=int, default=32768)
    ap.add_argument("--max-len", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    from peft import LoraConfig, get_peft_model
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer = Tokenizer.from_file(str(args.model_dir / "tokenizer.json"))
    examples, dropped = load_examples(args.examples, tokenizer, args.max_len)
    print(f"{len(examples)} examples ({dropped} longer than {args.max_len} tokens dropped)", flush=True)

    on_gpu = device.type == "cuda"  # the CPU runs float32 (a smoke test), the GPU bf16
    weights = torch.bfloat16 if on_gpu else torch.float32
    model = AutoModelForCausalLM.from_pretrained(
        args.model_dir, dtype=weights, attn_implementation="sdpa"
    ).to(device)
    config = LoraConfig(
        r=args.rank, lora_alpha=args.alpha, lora_dropout=args.dropout, bias="none",
        target_modules=TARGET_MODULES, task_type="CAUSAL_LM",
    )
    model = get_peft_model(model, config)
    model.print_trainable_parameters()
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.data = p.data.float()
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0, betas=(0.9, 0.99))

    plan = []
    whole, part = int(args.epochs), args.epochs - int(args.epochs)
    for _ in range(whole):
        plan += batches(examples, args.tokens_per_batch, rng)
    if part > 0:
        extra = batches(examples, args.tokens_per_batch, rng)
        plan += extra[: int(len(extra) * part)]
    warmup = max(10, len(plan) // 30)
    pad_id = tokenizer.token_to_id(END_OF_TURN)
    model.train()
    started, curve, seen = time.time(), [], 0
    for step, batch in enumerate(plan):
        elapsed = time.time() - started
        progress = max(step / len(plan), elapsed / (args.minutes * 60))
        if progress >= 1.0:
            print(f"time budget reached at step {step} of {len(plan)}", flush=True)
            break
        for g in optimizer.param_groups:
            g["lr"] = learning_rate(args.lr, progress, step, warmup)
        ids, labels = collate(examples, batch, pad_id, device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=on_gpu):
            loss = answer_loss(model, ids, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        seen += sum(len(examples[i][0]) for i in batch)
        if step % 20 == 0:
            value = loss.item()
            curve.append({"step": step, "seconds": round(elapsed, 1), "loss": round(value, 4)})
            print(f"step {step}/{len(plan)} loss {value:.4f} lr {optimizer.param_groups[0]['lr']:.2e} "
                  f"{seen / max(time.time() - started, 1e-9):,.0f} tok/s", flush=True)
    total = time.time() - started

    for p in params:
        p.data = p.data.to(torch.bfloat16)
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    record = {
        "base_model": str(args.model_dir), "examples": len(examples), "dropped_too_long": dropped,
        "steps_run": step + 1 if plan else 0, "steps_planned": len(plan), "tokens_seen": seen,
        "seconds": round(total, 1), "rank": args.rank, "alpha": args.alpha, "dropout": args.dropout,
        "lr": args.lr, "epochs": args.epochs, "tokens_per_batch": args.tokens_per_batch,
        "max_len": args.max_len, "seed": args.seed, "target_modules": TARGET_MODULES,
        "torch": torch.__version__, "pipeline_sha256": pipeline_checksums(), "loss_curve": curve,
    }
    (args.out / "training.json").write_text(json.dumps(record, indent=1))
    print(f"saved {args.out} after {total:.0f} s, {seen:,} tokens", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
