#!/usr/bin/env python3
"""Record reference logits of SmolLM2-135M-Instruct for docqa: ``tests/golden/llama_logits.*``.

What: loads the Q4_1 GGUF directly with Hugging Face transformers
(``AutoModelForCausalLM.from_pretrained(dir, gguf_file=name)``), which dequantises the tensors and undoes
llama.cpp's Q/K row permutation itself, so the reference is independent of docqa's own GGUF conversion.
The forward pass runs in float32 (TF32 off, eager attention) on CUDA when present, else on the CPU. For
every prompt of ``llama_prompts.json`` it records the logits at the last position, and for prompts that
list ``positions`` (the ~2,000-token passage) the logits at each of those positions. It also
greedy-decodes the France prompt for 16 tokens.
Outputs (in ``--out``):
  llama_logits.safetensors   f32 tensors ``<prompt_id>.last`` and ``<prompt_id>.pos<N>``, each [vocab]
  llama_logits_meta.json     per tensor: prompt, position, top-10 ids and values; versions, device,
                             config checks, and the greedy decode (ids and text)
Needs: torch, transformers >= 4.46, numpy, safetensors, and the ``gguf`` package. Offline machines without
``gguf``: put its wheel into ``.whl/`` first (on a machine with network:
``python3 -m pip download --no-deps --only-binary=:all: -d .whl gguf==0.19.0``); this script then adds
the wheels of ``.whl/`` to ``sys.path`` when ``import gguf`` fails (gguf is pure Python; its own
dependencies numpy and pyyaml come with transformers).
Run:   python3 tests/reference/logits_golden.py --gguf PATH/SmolLM2-135M-Instruct.Q4_1.gguf --out tests/golden
       (without ``--gguf`` the GGUF is fetched with pip into ``.cache/``, which needs network access)
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ensure_gguf() -> str:
    """Import ``gguf``, adding the wheels of ``.whl/`` to ``sys.path`` first if it is not installed."""
    try:
        return importlib.import_module("gguf").__name__
    except ImportError:
        wheels = sorted((ROOT / ".whl").glob("*.whl"))
        if not wheels:
            raise SystemExit("gguf is not installed and .whl/ holds no wheel: see this script's header")
        for wheel in wheels:
            sys.path.insert(0, str(wheel))
        importlib.invalidate_caches()
        return f"{importlib.import_module('gguf').__name__} (from {', '.join(w.name for w in wheels)})"


GGUF_SOURCE = ensure_gguf()

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
from importlib.metadata import version  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from gguf import GGUFReader  # noqa: E402
from gguf.quants import dequantize  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from gguf_text import GgufDetokenizer  # noqa: E402

GREEDY_PROMPT = "france_chatml"
GREEDY_TOKENS = 16
TOP_K = 10
EXPECTED = {"num_hidden_layers": 30, "hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9,
            "num_key_value_heads": 3, "vocab_size": 49152}


def default_gguf() -> Path:
    """The GGUF fetched with pip into ``.cache/`` (see ``smollm2_gguf.py``)."""
    from smollm2_gguf import gguf_path

    return gguf_path()


def set_exact_float32() -> None:
    """Full-precision float32 matmuls: no TF32 on Ampere and newer GPUs, no reduced precision on CPU."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def load_model(gguf: Path, device: str) -> torch.nn.Module:
    """The model as transformers builds it from the GGUF, in float32, eager attention, eval mode."""
    major = int(transformers.__version__.split(".")[0])
    dtype_arg = {"dtype": torch.float32} if major >= 5 else {"torch_dtype": torch.float32}
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, attn_implementation="eager", **dtype_arg
    )
    # transformers marks GGUF-loaded models as quantised and refuses `.float()`; the weights are already
    # dequantised to the float32 asked for above, which this check makes sure of.
    dtypes = {p.dtype for p in model.parameters()}
    if dtypes != {torch.float32}:
        raise SystemExit(f"expected float32 weights from the GGUF, got {dtypes}")
    return model.to(device).eval()


def rope_theta(config) -> float | None:
    """RoPE base from the config (``rope_theta`` before transformers 5, ``rope_parameters`` after)."""
    theta = getattr(config, "rope_theta", None)
    if theta is None:
        theta = (getattr(config, "rope_parameters", None) or {}).get("rope_theta")
    return None if theta is None else float(theta)


def check_model(model: torch.nn.Module, reader: GGUFReader) -> dict:
    """Check config, tied LM head and the dequantised embedding against gguf's own dequantisation."""
    config = model.config
    for key, want in EXPECTED.items():
        got = getattr(config, key)
        if got != want:
            raise SystemExit(f"config.{key} = {got}, expected {want}")
    names = {t.name for t in reader.tensors}
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    tied_by_us = False
    if "output.weight" not in names and not torch.equal(head, embed):
        model.get_output_embeddings().weight = embed  # GGUF without output.weight: the LM head is token_embd
        tied_by_us = True
    token_embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    ours = dequantize(token_embd.data, token_embd.tensor_type).reshape(embed.shape)
    embed_diff = float(np.abs(embed.detach().cpu().numpy() - ours).max())
    if embed_diff > 1e-6:
        raise SystemExit(f"embedding differs from gguf's dequantisation by {embed_diff}")
    theta = rope_theta(config)
    if theta != 100000.0:
        raise SystemExit(f"rope_theta = {theta}, expected 100000")
    return {
        "rope_theta": theta,
        "rms_norm_eps": float(config.rms_norm_eps),
        "tie_word_embeddings": bool(config.tie_word_embeddings),
        "lm_head_tied_by_this_script": tied_by_us,
        "embedding_max_abs_diff_vs_gguf_dequantize": embed_diff,
    }


@torch.no_grad()
def logits_at(model: torch.nn.Module, ids: list[int], positions: list[int], device: str) -> np.ndarray:
    """float32 logits ``[len(positions), vocab]`` of one unpadded sequence at the given positions."""
    input_ids = torch.tensor([ids], dtype=torch.long, device=device)
    out = model(input_ids=input_ids, use_cache=False)
    return out.logits[0, positions].float().cpu().numpy()


@torch.no_grad()
def greedy(model: torch.nn.Module, ids: list[int], steps: int, device: str) -> list[int]:
    """Greedy decoding by full recomputation each step (no cache: the simplest correct reference)."""
    seq = list(ids)
    for _ in range(steps):
        last = logits_at(model, seq, [len(seq) - 1], device)[0]
        seq.append(int(np.argmax(last)))
    return seq[len(ids):]


def top_k(row: np.ndarray) -> dict:
    """Top-k ids and values of one logits row, best first."""
    order = np.argsort(-row, kind="stable")[:TOP_K]
    return {"top_ids": [int(i) for i in order], "top_values": [float(row[i]) for i in order]}


def record_prompt(model, prompt: dict, device: str, tensors: dict, meta: dict) -> None:
    """Logits of one prompt at its last position and at its listed positions."""
    ids = prompt["ids"]
    named = [("last", len(ids) - 1)] + [(f"pos{p}", p) for p in prompt.get("positions", [])]
    rows = logits_at(model, ids, [p for _, p in named], device)
    for (suffix, position), row in zip(named, rows):
        name = f"{prompt['id']}.{suffix}"
        tensors[name] = np.ascontiguousarray(row, dtype=np.float32)
        meta[name] = {"prompt_id": prompt["id"], "position": position, "n_tokens": len(ids), **top_k(row)}
    print(f"{prompt['id']}: {len(ids)} tokens, {len(named)} rows, top-1 at last = {meta[prompt['id'] + '.last']['top_ids'][0]}")


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, default=None, help="GGUF file (default: fetched into .cache/)")
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "golden", help="output directory")
    parser.add_argument("--prompts", type=Path, default=ROOT / "tests" / "golden" / "llama_prompts.json")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    gguf = (args.gguf or default_gguf()).resolve()
    prompts = json.loads(args.prompts.read_text(encoding="utf-8"))["prompts"]

    set_exact_float32()
    reader = GGUFReader(gguf)
    model = load_model(gguf, args.device)
    checks = check_model(model, reader)
    tensors, per_tensor = {}, {}
    for prompt in prompts:
        record_prompt(model, prompt, args.device, tensors, per_tensor)

    france = next(p for p in prompts if p["id"] == GREEDY_PROMPT)
    generated = greedy(model, france["ids"], GREEDY_TOKENS, args.device)
    text = GgufDetokenizer(reader).decode(generated)
    print(f"greedy {GREEDY_PROMPT}: {generated} -> {text!r}")

    meta = {
        "model": {"file": gguf.name, "sha256": sha256(gguf)},
        "prompts_file": args.prompts.name,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "gguf": version("gguf"), "numpy": np.__version__, "python": sys.version.split()[0]},
        "gguf_import": GGUF_SOURCE,
        "device": args.device if args.device == "cpu" else torch.cuda.get_device_name(args.device),
        "dtype": "float32", "tf32": False, "attn_implementation": "eager",
        "checks": checks,
        "tensors": per_tensor,
        "greedy": {"prompt_id": GREEDY_PROMPT, "new_tokens": GREEDY_TOKENS, "ids": generated, "text": text,
                   "eos_id": 2, "stops_at": generated.index(2) if 2 in generated else None},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(args.out / "llama_logits.safetensors"),
              metadata={"source": "transformers from GGUF, float32", "model": gguf.name})
    (args.out / "llama_logits_meta.json").write_text(json.dumps(meta, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {len(tensors)} tensors to {args.out / 'llama_logits.safetensors'}")


if __name__ == "__main__":
    main()
