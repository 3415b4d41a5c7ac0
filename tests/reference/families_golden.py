#!/usr/bin/env python3
"""Golden logits for the model families docqa loads: tiny random checkpoints of each family's exact
architecture, run by Hugging Face transformers in float32.

What it writes, under tests/golden/families/ (read by engine/tests/family_parity.rs):
  <family>/         config.json as the family publishes it (rope_scaling and rope_theta at the top level)
                    and bf16 weights: model.safetensors, or shards with model.safetensors.index.json
  logits.safetensors  f32 [tokens, vocab] per family: `<family>` (the model as configured) and
                    `<family>.ablated` (the same weights with the family's feature switched off), so a
                    test can show the feature is exercised
  meta.json         versions, the token sequence, what each family exercises, and the logits' shift
                    from rounding every linear input to bf16 (docqa's matmuls do)

Families (hidden 64, 4 heads, 2 KV heads, head_dim 32 (the CUDA kernels take multiples of 32), intermediate 128,
vocab 256, 2 layers, 40 tokens):
  llama3          LlamaForCausalLM, rope_scaling llama3 (factor 8, low 1, high 4, original 64), untied head
  qwen2-yarn      Qwen2ForCausalLM: q/k/v biases, untied head, rope_scaling yarn (factor 4, original 32),
                  weights in two shards with an index
  mistral-sliding MistralForCausalLM, sliding_window 8 on every layer
  qwen2-sliding   Qwen2ForCausalLM with use_sliding_window, sliding_window 6, max_window_layers 1 (only the
                  second layer slides)

The weights are drawn here (uniform, scaled so logits spread), stored as bf16 and loaded back in float32,
so docqa and transformers read the same values; attention is eager (explicit masks).

Needs: torch, transformers (5.x; 4.46+ reads the same configs), safetensors. Run from anywhere:
  python3 tests/reference/families_golden.py
Deterministic for a given seed and library versions.
"""

import json
import math
import platform
import shutil
from pathlib import Path

import safetensors
import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests/golden/families"
SEED = 20261202
HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB, TOKENS = 64, 2, 4, 2, 32, 128, 256, 40


def base_config(architecture: str, model_type: str) -> dict:
    return {
        "architectures": [architecture],
        "model_type": model_type,
        "hidden_size": HIDDEN,
        "intermediate_size": FFN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
        "vocab_size": VOCAB,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    }


def families() -> dict:
    """Each family: its config.json, the config with its feature off, its q/k/v biases, its shards."""
    llama3 = base_config("LlamaForCausalLM", "llama") | {
        "rope_theta": 500000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
        "max_position_embeddings": 512,
        "attention_bias": False,
        "mlp_bias": False,
    }
    qwen_yarn = base_config("Qwen2ForCausalLM", "qwen2") | {
        "rope_theta": 10000.0,
        "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
        "max_position_embeddings": 128,
        "sliding_window": 128,
        "use_sliding_window": False,
        "max_window_layers": LAYERS,
    }
    mistral = base_config("MistralForCausalLM", "mistral") | {
        "rope_theta": 10000.0,
        "max_position_embeddings": 256,
        "sliding_window": 8,
    }
    qwen_sliding = base_config("Qwen2ForCausalLM", "qwen2") | {
        "rope_theta": 10000.0,
        "max_position_embeddings": 256,
        "sliding_window": 6,
        "use_sliding_window": True,
        "max_window_layers": 1,
    }
    return {
        "llama3": (llama3, llama3 | {"rope_scaling": None}, False, 1),
        "qwen2-yarn": (qwen_yarn, qwen_yarn | {"rope_scaling": None}, True, 2),
        "mistral-sliding": (mistral, mistral | {"sliding_window": None}, False, 1),
        "qwen2-sliding": (qwen_sliding, qwen_sliding | {"use_sliding_window": False}, True, 1),
    }


def weights(g: torch.Generator, biases: bool) -> dict:
    def uni(shape, bound):
        return torch.empty(shape).uniform_(-bound, bound, generator=g).to(torch.bfloat16)

    def norm():
        return (1 + uni((HIDDEN,), 0.1).float()).to(torch.bfloat16)

    w = {
        "model.embed_tokens.weight": uni((VOCAB, HIDDEN), 1.0),
        "model.norm.weight": norm(),
        "lm_head.weight": uni((VOCAB, HIDDEN), math.sqrt(3.0 / HIDDEN)),
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
        w[f"{p}.input_layernorm.weight"] = norm()
        w[f"{p}.post_attention_layernorm.weight"] = norm()
        for module, (rows, cols) in shapes.items():
            # queries and keys larger, so attention is peaked enough for positions to matter
            scale = 3.0 if module in ("self_attn.q_proj", "self_attn.k_proj") else 1.0
            w[f"{p}.{module}.weight"] = uni((rows, cols), scale * math.sqrt(3.0 / cols))
        if biases:
            for module, rows in (("q_proj", qd), ("k_proj", kvd), ("v_proj", kvd)):
                w[f"{p}.self_attn.{module}.bias"] = uni((rows,), 0.5)
    return w


def save(model_dir: Path, config: dict, tensors: dict, shards: int) -> None:
    model_dir.mkdir(parents=True)
    (model_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if shards == 1:
        save_file(tensors, str(model_dir / "model.safetensors"), metadata={"format": "pt"})
        return
    names = list(tensors)
    per = math.ceil(len(names) / shards)
    weight_map, total = {}, 0
    for k in range(shards):
        part = names[k * per : (k + 1) * per]
        file = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: tensors[n] for n in part}, str(model_dir / file), metadata={"format": "pt"})
        weight_map.update({n: file for n in part})
        total += sum(tensors[n].numel() * tensors[n].element_size() for n in part)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (model_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def load(model_dir: Path):
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, attn_implementation="eager")
    return model.eval()


@torch.no_grad()
def logits(model, ids: list, bf16_inputs: bool = False) -> torch.Tensor:
    hooks = []
    if bf16_inputs:
        for m in model.modules():
            if isinstance(m, torch.nn.Linear):
                hooks.append(m.register_forward_pre_hook(lambda _m, a: (a[0].to(torch.bfloat16).float(),)))
    out = model(input_ids=torch.tensor([ids])).logits[0].float().contiguous()
    for h in hooks:
        h.remove()
    return out


def check_loaded(name: str, model) -> dict:
    """What transformers made of the config: the facts each family's test relies on."""
    cfg = model.config
    rotary = model.model.rotary_emb
    seen = {
        "rope_type": getattr(rotary, "rope_type", None),
        "attention_scaling": float(getattr(rotary, "attention_scaling", 1.0)),
        "sliding_window": getattr(cfg, "sliding_window", None),
        "layer_types": getattr(cfg, "layer_types", None),
    }
    want_rope = {"llama3": "llama3", "qwen2-yarn": "yarn"}.get(name, "default")
    assert seen["rope_type"] == want_rope, f"{name}: transformers used rope {seen['rope_type']}"
    if name == "mistral-sliding":
        assert seen["sliding_window"] == 8, seen
    if name == "qwen2-sliding":
        assert seen["layer_types"] == ["full_attention", "sliding_attention"], seen
    if name == "qwen2-yarn":
        assert model.model.layers[0].self_attn.q_proj.bias is not None, "no q bias"
    return seen


def stats(a: torch.Tensor, b: torch.Tensor) -> dict:
    return {"max_abs": float((a - b).abs().max()), "mean_abs": float((a - b).abs().mean())}


def main() -> None:
    torch.manual_seed(SEED)
    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(3, VOCAB, (TOKENS,), generator=g).tolist()
    shutil.rmtree(OUT, ignore_errors=True)
    out, meta = {}, {}
    for name, (config, ablated_config, biases, shards) in families().items():
        tensors = weights(g, biases)
        save(OUT / name, config, tensors, shards)
        model = load(OUT / name)
        seen = check_loaded(name, model)
        scratch = OUT / f".{name}-ablated"
        save(scratch, ablated_config, tensors, 1)
        ablated = logits(load(scratch), ids)
        shutil.rmtree(scratch)
        out[name] = logits(model, ids)
        out[f"{name}.ablated"] = ablated
        meta[name] = {
            "config": config,
            "transformers_saw": seen,
            "feature_off_shift": stats(out[name], ablated),
            "bf16_linear_inputs_shift": stats(out[name], logits(model, ids, bf16_inputs=True)),
            "logit_range": [float(out[name].min()), float(out[name].max())],
        }
    save_file(out, str(OUT / "logits.safetensors"))
    meta = {
        "made_by": "tests/reference/families_golden.py",
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "safetensors": safetensors.__version__,
        },
        "seed": SEED,
        "tokens": ids,
        "families": meta,
    }
    (OUT / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    for name, m in meta["families"].items():
        print(
            f"{name:16} feature off shifts logits by {m['feature_off_shift']['max_abs']:.3f}, "
            f"bf16 inputs by {m['bf16_linear_inputs_shift']['max_abs']:.4f}, range {m['logit_range']}"
        )


if __name__ == "__main__":
    main()
