#!/usr/bin/env python3
"""Writes the PLACEHOLDER reader adapter into training/reader/ until the trained one replaces it.

What: a faithful *untrained* PEFT LoRA for SmolLM2-135M-Instruct, exactly as PEFT initialises one:
rank 16, lora_alpha 32, on the seven projections (q/k/v/o/gate/up/down) of all 30 layers, lora_A drawn
kaiming-uniform (PEFT's default: U(-1/sqrt(in), 1/sqrt(in))), lora_B all zeros, stored in bf16 with
SmolLM2-135M's shapes (hidden 576, 9 heads and 3 KV heads of 64, intermediate 1536). Since B is zero,
merging it changes no weight: docqa with the placeholder answers exactly as the base model does.
Writes adapter_config.json, adapter_model.safetensors and SHA256SUMS (sha256sum format, sorted).

Needs: torch and safetensors (the venv of tests/reference/lora_golden.py has both:
  python3 -m venv .cache/venv-lora && .cache/venv-lora/bin/pip install torch safetensors).
Run:   .cache/venv-lora/bin/python training/make_placeholder_adapter.py [--out training/reader]
Deterministic: the same seed gives the same bytes.
"""

import argparse
import hashlib
import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file

HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN = 576, 30, 9, 3, 64, 1536
RANK, ALPHA = 16, 32
# module path -> (out, in)
SHAPES = {
    "self_attn.q_proj": (HEADS * HEAD_DIM, HIDDEN),
    "self_attn.k_proj": (KV_HEADS * HEAD_DIM, HIDDEN),
    "self_attn.v_proj": (KV_HEADS * HEAD_DIM, HIDDEN),
    "self_attn.o_proj": (HIDDEN, HEADS * HEAD_DIM),
    "mlp.gate_proj": (FFN, HIDDEN),
    "mlp.up_proj": (FFN, HIDDEN),
    "mlp.down_proj": (HIDDEN, FFN),
}


def config() -> dict:
    return {
        "alpha_pattern": {},
        "base_model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "layers_pattern": None,
        "layers_to_transform": None,
        "lora_alpha": ALPHA,
        "lora_dropout": 0.0,
        "modules_to_save": None,
        "peft_type": "LORA",
        "r": RANK,
        "rank_pattern": {},
        "revision": None,
        "target_modules": [m.split(".")[1] for m in SHAPES],
        "task_type": "CAUSAL_LM",
        "use_dora": False,
        "use_rslora": False,
    }


def tensors(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for i in range(LAYERS):
        for module, (rows, cols) in SHAPES.items():
            key = f"base_model.model.model.layers.{i}.{module}"
            bound = 1.0 / math.sqrt(cols)
            a = torch.empty(RANK, cols).uniform_(-bound, bound, generator=g)
            out[f"{key}.lora_A.weight"] = a.to(torch.bfloat16)
            out[f"{key}.lora_B.weight"] = torch.zeros(rows, RANK, dtype=torch.bfloat16)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "reader")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(config(), indent=2, sort_keys=True) + "\n"
    (args.out / "adapter_config.json").write_text(text)
    save_file(tensors(args.seed), str(args.out / "adapter_model.safetensors"), metadata={"format": "pt"})
    lines = []
    for name in ["adapter_config.json", "adapter_model.safetensors"]:
        digest = hashlib.sha256((args.out / name).read_bytes()).hexdigest()
        lines.append(f"{digest}  {name}\n")
    (args.out / "SHA256SUMS").write_text("".join(lines))
    print("".join(lines), end="")


if __name__ == "__main__":
    main()
