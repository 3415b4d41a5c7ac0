#!/usr/bin/env python3
"""Golden logits for docqa's LoRA merge: a tiny random Llama, a random PEFT LoRA on all seven projections,
merged by PEFT itself (`PeftModel.from_pretrained(...).merge_and_unload()`), forward in float32.

What it writes, under tests/golden/lora/ (read by engine/tests/lora_adapter.rs):
  model/       config.json + bf16 model.safetensors: hidden 64, 2 layers, 4 heads, 2 KV heads, head_dim 16,
               intermediate 128, vocab 128, tied embeddings (SmolLM2's layout), rope_theta 100000
  adapter/     PEFT's own save_pretrained output (adapter_config.json, bf16 adapter_model.safetensors):
               rank 4, lora_alpha 8 (scale 2), lora_A kaiming-uniform, lora_B random (NOT zero)
  logits.safetensors  f32 [tokens, vocab]: `merged` (base + PEFT merge, float32 end to end) and `base`
  meta.json    versions, the token sequence, and the measured effect of rounding to bf16 (below)

The base is loaded in float32 (its bf16 values exactly), the adapter is upcast to float32 by PEFT, so the
merge W + 2 * B @ A and the forward are float32. docqa merges in f32 too, but then rounds the merged
weight to the base's bf16, and its AVX-512 BF16 matmul also rounds activations to bf16. meta.json records
what each rounding costs on these logits, measured here on the same model: merged weights rounded to bf16
(`bf16_merged_weights`), and that plus every linear layer's input rounded to bf16 (`bf16_weights_and_inputs`).

Needs: python3 with pip; torch (the CPU-only use of any wheel), transformers, peft, safetensors, in a venv:
  python3 -m venv .cache/venv-lora && .cache/venv-lora/bin/pip install torch transformers peft safetensors
Run (from anywhere; paths are the repository's):
  .cache/venv-lora/bin/python tests/reference/lora_golden.py
Deterministic for a given seed and library versions.
"""

import json
import math
import os
import platform
import shutil
from pathlib import Path

import peft
import safetensors
import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import save_file
from transformers import LlamaForCausalLM

ROOT = Path(__file__).resolve().parents[2]
OUT = Path("tests/golden/lora")  # relative to ROOT: PEFT records the base model's path as given
SEED = 20261201
TOKENS = [1, 17, 42, 99, 5, 63, 127, 8, 33, 2, 71, 100, 64, 0, 12, 90]
HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 64, 2, 4, 2, 16, 128, 128
RANK, ALPHA, B_STD = 4, 8, 0.1
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def config() -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": FFN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 100000.0,
        "rope_scaling": None,
        "max_position_embeddings": 256,
        "tie_word_embeddings": True,
        "vocab_size": VOCAB,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "bfloat16",
    }


def base_weights(g: torch.Generator) -> dict:
    """bf16 weights with a spread of logits worth comparing (not HF's 0.02-std init)."""

    def uni(shape, bound):
        return torch.empty(shape).uniform_(-bound, bound, generator=g).to(torch.bfloat16)

    w = {
        "model.embed_tokens.weight": uni((VOCAB, HIDDEN), 1.0),
        "model.norm.weight": (1 + uni((HIDDEN,), 0.1).float()).to(torch.bfloat16),
    }
    qd, kvd = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    shapes = {
        "self_attn.q_proj": (qd, HIDDEN),
        "self_attn.k_proj": (kvd, HIDDEN),
        "self_attn.v_proj": (kvd, HIDDEN),
        "self_attn.o_proj": (HIDDEN, qd),
        "mlp.gate_proj": (FFN, HIDDEN),
        "mlp.up_proj": (FFN, HIDDEN),
        "mlp.down_proj": (HIDDEN, FFN),
    }
    for i in range(LAYERS):
        p = f"model.layers.{i}"
        for norm in ["input_layernorm", "post_attention_layernorm"]:
            w[f"{p}.{norm}.weight"] = (1 + uni((HIDDEN,), 0.1).float()).to(torch.bfloat16)
        for module, (rows, cols) in shapes.items():
            w[f"{p}.{module}.weight"] = uni((rows, cols), math.sqrt(3.0 / cols))
    return w


def load_base(model_dir: Path) -> LlamaForCausalLM:
    model = LlamaForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, attn_implementation="eager")
    rope = getattr(model.config, "rope_parameters", None) or {}
    theta = rope.get("rope_theta", getattr(model.config, "rope_theta", None))
    assert theta == 100000.0, f"transformers read rope_theta {theta}"
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "not tied"
    return model.eval()


@torch.no_grad()
def logits(model) -> torch.Tensor:
    ids = torch.tensor([TOKENS])
    return model(input_ids=ids).logits[0].float().contiguous()


def write_adapter(model_dir: Path, adapter_dir: Path, g: torch.Generator) -> None:
    cfg = LoraConfig(
        r=RANK, lora_alpha=ALPHA, target_modules=TARGETS, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM"
    )
    model = get_peft_model(load_base(model_dir), cfg)
    for name, p in model.named_parameters():
        if "lora_A" in name:
            bound = 1.0 / math.sqrt(p.shape[1])
            p.data = torch.empty(p.shape).uniform_(-bound, bound, generator=g).to(torch.bfloat16)
        elif "lora_B" in name:
            p.data = (torch.randn(p.shape, generator=g) * B_STD).to(torch.bfloat16)
    model.save_pretrained(str(adapter_dir), safe_serialization=True)
    (adapter_dir / "README.md").unlink(missing_ok=True)  # PEFT's model card template
    # PEFT writes target_modules from a set, in hash order: sorted, the file is the same on every run.
    path = adapter_dir / "adapter_config.json"
    saved = json.loads(path.read_text())
    saved["target_modules"] = sorted(saved["target_modules"])
    path.write_text(json.dumps(saved, indent=2, sort_keys=True))


def merged_model(model_dir: Path, adapter_dir: Path):
    model = PeftModel.from_pretrained(load_base(model_dir), str(adapter_dir))
    dtypes = {p.dtype for n, p in model.named_parameters() if "lora_" in n}
    assert dtypes == {torch.float32}, f"PEFT kept the adapter in {dtypes}: the merge would not be f32"
    return model.merge_and_unload().eval()


@torch.no_grad()
def rounded_logits(model, inputs_too: bool) -> torch.Tensor:
    """Logits with every linear weight rounded to bf16 (and, with `inputs_too`, every linear input)."""
    saved = {n: p.detach().clone() for n, p in model.named_parameters()}
    hooks = []
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            m.weight.data = m.weight.data.to(torch.bfloat16).float()
            if inputs_too:
                hooks.append(m.register_forward_pre_hook(lambda _m, args: (args[0].to(torch.bfloat16).float(),)))
    out = logits(model)
    for h in hooks:
        h.remove()
    for n, p in model.named_parameters():
        p.data = saved[n]
    return out


def stats(a: torch.Tensor, b: torch.Tensor) -> dict:
    return {"max_abs": float((a - b).abs().max()), "mean_abs": float((a - b).abs().mean())}


def main() -> None:
    os.chdir(ROOT)
    torch.manual_seed(SEED)
    g = torch.Generator().manual_seed(SEED)
    model_dir, adapter_dir = OUT / "model", OUT / "adapter"
    shutil.rmtree(OUT, ignore_errors=True)
    model_dir.mkdir(parents=True)
    (model_dir / "config.json").write_text(json.dumps(config(), indent=2) + "\n")
    save_file(base_weights(g), str(model_dir / "model.safetensors"), metadata={"format": "pt"})
    base = logits(load_base(model_dir))
    write_adapter(model_dir, adapter_dir, g)
    model = merged_model(model_dir, adapter_dir)
    merged = logits(model)
    save_file({"merged": merged, "base": base}, str(OUT / "logits.safetensors"))
    meta = {
        "made_by": "tests/reference/lora_golden.py",
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "peft": peft.__version__,
            "safetensors": safetensors.__version__,
        },
        "seed": SEED,
        "tokens": TOKENS,
        "lora": {
            "r": RANK,
            "lora_alpha": ALPHA,
            "scale": ALPHA / RANK,
            "target_modules": TARGETS,
            "lora_A": "U(-1/sqrt(in), 1/sqrt(in))",
            "lora_B_std": B_STD,
            "stored_as": "bf16",
        },
        "merge": "PeftModel.from_pretrained(float32 base, adapter).merge_and_unload(), adapter upcast to f32",
        "forward": "float32, eager attention, CPU",
        "logits": {"min": float(merged.min()), "max": float(merged.max())},
        "merged_vs_base": stats(merged, base),
        "bf16_merged_weights": stats(rounded_logits(model, False), merged),
        "bf16_weights_and_inputs": stats(rounded_logits(model, True), merged),
    }
    (OUT / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(
        json.dumps(
            {k: meta[k] for k in ["logits", "merged_vs_base", "bf16_merged_weights", "bf16_weights_and_inputs"]},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
