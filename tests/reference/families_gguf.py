#!/usr/bin/env python3
"""GGUF files of two golden families (tests/golden/families/, made by families_golden.py), laid out as
llama.cpp's HF-to-GGUF converter lays out those architectures, so that `docqa models convert` can be
checked against transformers' logits of the same weights (engine/tests/family_gguf.rs).

What it writes, under tests/golden/families_gguf/:
  llama3.gguf      general.architecture llama: the q and k rows of each head reordered to adjacent RoPE
                   pairs (GGUF row 2j + half holds HF row half * head_dim/2 + j), Llama 3's RoPE scaling as
                   the `rope_freqs` tensor of per-pair frequency divisors (no rope scaling keys), tokenizer
                   pre-type llama-bpe
  qwen2-yarn.gguf  general.architecture qwen2: rows as HF stores them (NeoX-style RoPE), the q/k/v biases,
                   YaRN as the {arch}.rope.scaling.* keys, tokenizer pre-type qwen2

Tensor names and metadata keys come from gguf-py (gguf.TensorNameMap and GGUFWriter's helpers); weights are
written as F32, which holds the golden bf16 values exactly. The vocabulary is the 256 byte-level tokens
(GPT-2's byte-to-character table), the golden checkpoints' vocabulary size, but for bytes 0, 3 and 4,
which give way to three merges, `Ġ t`, `1 2` and `12 3`, so that a test sees where the pre-tokenizer
splits (Llama 3 keeps up to three digits together, Qwen2 none). BOS is added by Llama 3's tokenizer only.

Needs: gguf, numpy (tests/reference/venv.sh). Run from anywhere:
  "$(tests/reference/venv.sh)" tests/reference/families_gguf.py
Deterministic: the same inputs give the same bytes.
"""

import importlib.metadata
import json
import sys
import math
import struct
from pathlib import Path

import gguf
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gguf_write  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests/golden/families"
OUT = ROOT / "tests/golden/families_gguf"

MERGES = {0: "\u0120 t", 3: "1 2", 4: "12 3"}

FAMILIES = {
    # family: (architecture, pre-tokenizer, q/k rows in adjacent pairs and BOS added)
    "llama3": (gguf.MODEL_ARCH.LLAMA, "llama-bpe", True),
    "qwen2-yarn": (gguf.MODEL_ARCH.QWEN2, "qwen2", False),
}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of one safetensors file as float32 (bf16 widened exactly)."""
    raw = path.read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + header_len])
    body = raw[8 + header_len :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        assert info["dtype"] == "BF16", f"{name}: {info['dtype']}"
        bits = np.frombuffer(body[start:end], dtype="<u2").astype(np.uint32) << 16
        out[name] = bits.view(np.float32).reshape(info["shape"])
    return out


def checkpoint(family: str) -> dict[str, np.ndarray]:
    tensors = {}
    for part in sorted((GOLDEN / family).glob("*.safetensors")):
        tensors.update(read_safetensors(part))
    return tensors


def adjacent_pairs(w: np.ndarray, heads: int) -> np.ndarray:
    """Reorders each head's rows from HF's halves (j, j + head_dim/2) to adjacent pairs (2j, 2j + 1)."""
    rows, cols = w.shape
    head_dim = rows // heads
    return w.reshape(heads, 2, head_dim // 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def llama3_rope_divisors(config: dict) -> np.ndarray:
    """Llama 3's per-pair frequency divisors: 1 for short wavelengths, the factor for long ones, and
    the smooth blend between them."""
    scaling = config["rope_scaling"]
    head_dim = config["head_dim"]
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    divisors = []
    for i in range(0, head_dim, 2):
        wavelength = 2 * math.pi * config["rope_theta"] ** (i / head_dim)
        if wavelength < original / high:
            divisors.append(1.0)
        elif wavelength > original / low:
            divisors.append(factor)
        else:
            smooth = (original / wavelength - low) / (high - low)
            divisors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(divisors, dtype=np.float32)


def byte_tokens() -> list[str]:
    """GPT-2's byte-to-character table: printable bytes stand for themselves, the rest from U+0100 on."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    tokens = [chars[b] for b in range(256)]
    for byte, merge in MERGES.items():
        tokens[byte] = merge.replace(" ", "")
    return tokens


def write(family: str) -> None:
    arch, pre, pairs = FAMILIES[family]
    config = json.loads((GOLDEN / family / "config.json").read_text())
    layers, heads, kv_heads = config["num_hidden_layers"], config["num_attention_heads"], config["num_key_value_heads"]
    writer = gguf.GGUFWriter(OUT / f"{family}.gguf", gguf.MODEL_ARCH_NAMES[arch])
    writer.add_name(f"docqa golden {family}")
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(layers)
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(config["head_dim"])
    writer.add_rope_freq_base(config["rope_theta"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    scaling = config.get("rope_scaling") or {}
    if scaling.get("rope_type", scaling.get("type")) == "yarn":
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(scaling["factor"])
        writer.add_rope_scaling_orig_ctx_len(scaling["original_max_position_embeddings"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(byte_tokens())
    writer.add_token_types([gguf.TokenType.NORMAL] * 256)
    writer.add_token_merges(list(MERGES.values()))
    writer.add_add_bos_token(pairs)
    writer.add_bos_token_id(config["bos_token_id"])
    writer.add_eos_token_id(config["eos_token_id"])

    names = gguf.TensorNameMap(arch, layers)
    if scaling.get("rope_type") == "llama3":
        writer.add_tensor(gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight", llama3_rope_divisors(config))
    for name, tensor in sorted(checkpoint(family).items()):
        if pairs and name.endswith("q_proj.weight"):
            tensor = adjacent_pairs(tensor, heads)
        elif pairs and name.endswith("k_proj.weight"):
            tensor = adjacent_pairs(tensor, kv_heads)
        gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert gguf_name is not None, f"no GGUF name for {name}"
        writer.add_tensor(gguf_name, np.ascontiguousarray(tensor, dtype=np.float32))
    gguf_write.finish(writer)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for family in FAMILIES:
        write(family)
        print(f"wrote {OUT / (family + '.gguf')}")
    (OUT / "meta.json").write_text(
        json.dumps({"gguf": importlib.metadata.version("gguf"), "numpy": np.__version__,
                    "families": {f: {"architecture": gguf.MODEL_ARCH_NAMES[a], "pre": p} for f, (a, p, _) in FAMILIES.items()}},
                   indent=2) + "\n")


if __name__ == "__main__":
    main()
