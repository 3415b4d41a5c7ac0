"""The GPU record as one table: docqa's kernel and end-to-end timings beside their anchors and targets.

Reads the logs of one run of bench/gpu_record.sh (any files, in any order: `gpu-check --bench` with
`DOCQA_BENCH_MODEL_DIR`, `bench/attention_sdpa.py`, `bench/hf_generate.py`, and for the real shapes
`bench/real_scale.sh`'s output and `DOCQA_BENCH_SHAPES=... gpu-check`; also older logs that hold the same
sections, concatenated or not; where two logs hold one figure, the later one's counts) and prints a
Markdown table, one row per target:

- causal prefill attention (the warpgroup-MMA kernel, its default cp.async form) against SDPA's cuDNN
  backend, TFLOP/s over TFLOP/s, at head_dim 128 and 16K and 64K tokens, and head_dim 64 and 16K: >= 0.95;
- decode attention, 8 sequences over bf16 pools, against SDPA at 32K and 131K: SDPA's time over docqa's, >= 1.0;
- decode attention over int8 pools against bf16 pools at 8 x 131K: bf16 time over int8 time, >= 1.6;
- end-to-end prefill against HF transformers on the same weights, HF's time over docqa's, >= 1.3: SmolLM2-135M
  at 8,191 tokens (its context ends at 8K), Llama-3.2-1B at 8,191 and 32,767;
- decode at batch 1 (graphs on, programmatic launch on) of the Llama-3.2-1B shape against the weight-bandwidth
  limit (the bytes of weights a token reads over the GPU's HBM bandwidth), >= 80 %, with the share of the
  copy bandwidth measured in the same run beside it; the SmolLM2-135M shape: >= 2,000 tok/s;
- every gpu-check parity check passed;
- at each real shape the logs hold (Llama-3.1-8B, Qwen2.5-7B): the first token of each prompt length against
  HF's forward pass (>= 1.3 up to 32K, the figures alone beyond), and decode at batch 1 after the shortest
  context against the weight-bandwidth limit (>= 80 %).

The bytes a decode token reads are every layer's products and the LM head (for a model with an untied head,
the embedding table's one row is left out). A row with one of its two figures missing says so; the targets
the logs give no figure for are listed after the table (a part not run, or a step that failed).
Usage: python3 bench/gpu_record.py LOG...
"""

import re
import sys
from pathlib import Path

# HBM bandwidth as NVIDIA specifies it, by the device name gpu-check or nvidia-smi prints.
HBM_TBPS = {"H200": 4.8, "H100 80GB HBM3": 3.35, "H100 NVL": 3.9, "H100 PCIe": 2.0}

# The models' shapes: (layers, hidden, intermediate, q heads, kv heads, head_dim, vocab).
SHAPES = {
    "smollm2-135m": (30, 576, 1536, 9, 3, 64, 49152),
    "llama-3.2-1b": (16, 2048, 8192, 32, 8, 64, 128256),
    "llama-3.1-8b": (32, 4096, 14336, 32, 8, 128, 128256),
    "qwen2.5-7b": (28, 3584, 18944, 28, 4, 128, 152064),
}
REAL_SHAPES = ("llama-3.1-8b", "qwen2.5-7b")


def weight_bytes(shape):
    """bf16 bytes of weights a decode token reads: every layer's products and the LM head."""
    layers, hidden, inter, heads, kv_heads, hd, vocab = SHAPES[shape]
    per_layer = hidden * (heads + 2 * kv_heads) * hd + heads * hd * hidden + 3 * hidden * inter
    return 2 * (layers * per_layer + vocab * hidden)


NUMBER = r"([0-9.]+)"
PATTERNS = [
    ("device", re.compile(r"^device: NVIDIA (.+?) \(sm_")),
    ("device", re.compile(r"^NVIDIA (.+?), \d+ MiB")),
    ("parity", re.compile(r"^summary: (\d+)/(\d+) checks passed")),
    ("section", re.compile(r"^(bench|anchor): (.*)")),
    ("section", re.compile(r"^(docqa) (\S+ \d+) tokens, chunk \d+:")),
    ("section", re.compile(r"^(writing) (\S+) with \d+ layers")),
    (
        "prefill_attn",
        re.compile(rf"^\s+head_dim\s+(\d+)\s+N\s+(\d+)\s+(?:(flash|cudnn)\s+)?{NUMBER} ms\s+{NUMBER} TFLOP/s"),
    ),
    ("decode_attn", re.compile(rf"^\s+ctx\s+(\d+)\s+{NUMBER} ms\s+{NUMBER} TB/s")),
    ("int8_decode", re.compile(rf"^\s+decode 8 x ctx\s+(\d+)\s+{NUMBER} ms")),
    ("prefill_e2e", re.compile(rf"^\s+prefill\s+(\d+) tokens\s+{NUMBER} ms")),
    (
        "decode_e2e",
        re.compile(
            rf"^\s+decode batch\s+(\d+), \d+ steps after (\d+), graphs on\s+pdl on\s+(?:persistent off\s+)?splits policy\s+"
            rf"{NUMBER} ms/step\s+{NUMBER} tok/s"
        ),
    ),
    ("first_token", re.compile(rf"^\[\d+ prompt tokens \(0 from the prefix cache\).*first token {NUMBER} s")),
    ("hf_real_prefill", re.compile(rf"^prefill\s+(\d+): {{'seconds': {NUMBER}")),
    ("copy", re.compile(rf"^anchor: device-to-device copy of 4 GiB: {NUMBER} TB/s")),
    ("copy", re.compile(rf"^copy bandwidth: {NUMBER} TB/s")),
]


def section_key(kind, text):
    """Which figures a heading's rows are, or None for sections not read here."""
    if kind == "docqa":  # bench/real_scale.sh: "docqa SHAPE N tokens, chunk C:"
        shape, n = text.split()
        return f"docqa real {shape} {n}"
    if kind == "writing":  # the checkpoint's shape, which HF's rows after it are about
        return f"hf real {text}"
    keys = [
        ("paged_attention prefill (wgmma)", "docqa prefill"),
        ("SDPA prefill", "sdpa prefill"),
        ("paged_attention decode, 8 sequences", "docqa decode"),
        ("SDPA decode, 8 sequences", "sdpa decode"),
        ("paged_attention decode over int8 KV pools", "docqa int8 decode"),
    ]
    for prefix, key in keys:
        if text.startswith(prefix):
            return key
    for shape in SHAPES:
        own = (f"end to end, random {shape}-shaped model", f"decode end to end, random {shape}-shaped model")
        if text.startswith(own) and "bf16 kv" in text.lower():
            return f"docqa e2e {shape}"
        if text.startswith(f"decode at the {shape} shape") and "bf16 kv" in text.lower():
            return f"docqa e2e {shape}"
        if text.startswith(f"{shape}-shaped random model"):
            return f"hf {shape}"
    return None


def read(paths):
    """Every figure of the logs, keyed by (section, row); a later log's figure replaces an earlier one's."""
    figures, section = {}, None
    for path in paths:
        for line in Path(path).read_text(errors="replace").splitlines():
            match = next(((kind, m.groups()) for kind, p in PATTERNS if (m := p.match(line))), None)
            if match is None:
                continue
            kind, g = match
            if kind == "section":
                section = section_key(g[0], g[1])
            else:
                record(figures, section, kind, g)
    return figures


# The sections each kind of row is read from (None: rows outside any section).
ROW_SECTIONS = {
    "device": None,
    "parity": None,
    "copy": None,
    "prefill_attn": ("docqa prefill", "sdpa prefill"),
    "decode_attn": ("docqa decode", "sdpa decode"),
    "int8_decode": ("docqa int8 decode",),
}


def record(figures, section, kind, g):
    """Keeps one matched row's figure, if it lies in a section read here."""
    wanted = ROW_SECTIONS.get(kind, ())
    if wanted is None:
        value = {"device": lambda: g[0], "parity": lambda: (int(g[0]), int(g[1])), "copy": lambda: float(g[0])}
        figures[kind] = value[kind]()
    elif section is None or (wanted and section not in wanted):
        return
    elif kind == "prefill_attn":
        figures[(section, g[2] or "docqa", int(g[0]), int(g[1]))] = float(g[4])
    elif kind in ("decode_attn", "int8_decode"):
        figures[(section, int(g[0]))] = float(g[1])
    elif kind == "prefill_e2e":
        figures[(section, "prefill", int(g[0]))] = float(g[1])
    elif kind == "decode_e2e" and section.startswith("docqa e2e"):
        figures[(section, "decode", int(g[0]), int(g[1]))] = (float(g[2]), float(g[3]))
    elif kind == "first_token" and section.startswith("docqa real"):
        # Several prompt-chunk sizes may time one length: the fastest is what docqa offers.
        shape, n = section.split()[2:]
        key = (f"docqa real {shape}", "prefill", int(n))
        figures[key] = min(figures.get(key, float("inf")), float(g[0]) * 1e3)
    elif kind == "hf_real_prefill" and section.startswith(("hf real", "docqa real")):
        shape = section.split()[2]
        figures[(f"hf real {shape}", "prefill", int(g[0]))] = float(g[1]) * 1e3


def rows(f):
    """(target, docqa, anchor, ratio or share, goal, met) for each target."""
    out = []
    for hd, n in [(128, 16384), (128, 65536), (64, 16384)]:
        ours = f.get(("docqa prefill", "docqa", hd, n))
        theirs = f.get(("sdpa prefill", "cudnn", hd, n))
        name = f"prefill attention, head_dim {hd}, {n:,} tokens, against cuDNN"
        out.append(ratio_row(name, ours, theirs, "TFLOP/s", 0.95, higher_is_better=True))
    for ctx in [32768, 131072]:
        ours, theirs = f.get(("docqa decode", ctx)), f.get(("sdpa decode", ctx))
        name = f"decode attention, 8 x {ctx:,}, against SDPA"
        out.append(ratio_row(name, ours, theirs, "ms", 1.0, higher_is_better=False))
    bf16, int8 = f.get(("docqa decode", 131072)), f.get(("docqa int8 decode", 131072))
    name = "decode attention, 8 x 131,072, int8 pools against bf16"
    out.append(ratio_row(name, int8, bf16, "ms", 1.6, higher_is_better=False))
    for shape, n in [("smollm2-135m", 8191), ("llama-3.2-1b", 8191), ("llama-3.2-1b", 32767)]:
        ours, theirs = f.get((f"docqa e2e {shape}", "prefill", n)), f.get((f"hf {shape}", "prefill", n))
        name = f"prefill of {n:,} tokens, {shape} shape, against HF transformers"
        out.append(ratio_row(name, ours, theirs, "ms", 1.3, higher_is_better=False))
    out.append(bandwidth_row(f, "llama-3.2-1b", 512))
    step = f.get(("docqa e2e smollm2-135m", "decode", 1, 512))
    tok_s = step[1] if step else None
    out.append(("decode at batch 1, smollm2-135m shape", fmt(tok_s, "tok/s"), "", "", "2,000 tok/s", met(tok_s, 2000)))
    parity = f.get("parity")
    passed = f"{parity[0]}/{parity[1]} passed" if parity else "missing"
    verdict = met(parity[0], parity[1]) if parity else "missing"
    out.append(("gpu-check parity", passed, "", "", "all", verdict))
    for shape in REAL_SHAPES:
        out.extend(real_shape_rows(f, shape))
    return out


def real_shape_rows(f, shape):
    """A real shape's prefill lengths against HF and its batch-1 decode, where the logs hold them."""
    ours = {k[2]: v for k, v in f.items() if isinstance(k, tuple) and k[:2] == (f"docqa real {shape}", "prefill")}
    theirs = {k[2]: v for k, v in f.items() if isinstance(k, tuple) and k[:2] == (f"hf real {shape}", "prefill")}
    steps = sorted(k[3] for k in f if isinstance(k, tuple) and k[:3] == (f"docqa e2e {shape}", "decode", 1))
    out = []
    for n in sorted(set(ours) | set(theirs)):
        name = f"first token of {n:,} tokens, {shape} shape, against HF transformers"
        # docqa reads N - 1 prompt tokens before its first new one; HF's forward pass takes N.
        goal = 1.3 if n <= 32768 else 0.0
        row = ratio_row(name, ours.get(n), theirs.get(n), "ms", goal, higher_is_better=False)
        out.append(row if goal else row[:4] + ("(no goal)", ""))
    if steps:
        out.append(bandwidth_row(f, shape, steps[0]))
    return out


def ratio_row(name, ours, theirs, unit, goal, higher_is_better):
    """A row comparing docqa's figure with an anchor's: the speed ratio, docqa faster above 1."""
    if ours is None or theirs is None:
        return (name, fmt(ours, unit), fmt(theirs, unit), "missing", f"{goal}x", "missing")
    ratio = ours / theirs if higher_is_better else theirs / ours
    return (name, fmt(ours, unit), fmt(theirs, unit), f"{ratio:.2f}x", f"{goal}x", met(ratio, goal))


def bandwidth_row(f, shape, context):
    """Decode at batch 1 after `context` tokens as a share of the weight-bandwidth limit."""
    name = f"decode at batch 1 after {context:,}, {shape} shape, share of the weight-bandwidth limit"
    step = f.get((f"docqa e2e {shape}", "decode", 1, context))
    peak = next((tbps for gpu, tbps in HBM_TBPS.items() if gpu in f.get("device", "")), None)
    if step is None or peak is None:
        return (name, fmt(step and step[0], "ms/step"), "missing", "missing", "80 %", "missing")
    tbps = weight_bytes(shape) / (step[0] * 1e-3) * 1e-12
    copy = f.get("copy")
    anchor = f"{peak} TB/s HBM" + (f"; copy {copy:.2f} TB/s ({tbps / copy:.0%})" if copy else "")
    share = tbps / peak
    return (name, f"{step[0]:.3f} ms/step, {tbps:.2f} TB/s", anchor, f"{share:.0%}", "80 %", met(share, 0.8))


def fmt(value, unit):
    if value is None:
        return "missing"
    return f"{value:,.3f} {unit}" if value < 100 else f"{value:,.0f} {unit}"


def met(value, goal):
    if value is None:
        return "missing"
    return "met" if value >= goal else "not met"


def has_figures(row):
    """Whether the logs gave the row any figure of docqa's or of its anchor."""
    return any(cell not in ("missing", "") for cell in row[1:3])


def main(paths):
    f = read(paths)
    print(f"GPU record on {f.get('device', 'an unnamed device')}, from {len(paths)} log(s)\n")
    print("| target | docqa | anchor | docqa / anchor | goal | |")
    print("|---|---|---|---|---|---|")
    table = rows(f)
    for row in filter(has_figures, table):
        print("| " + " | ".join(row) + " |")
    empty = [row[0] for row in table if not has_figures(row)]
    if empty:
        print(f"\nNo figures in these logs for {len(empty)} target(s): " + "; ".join(empty) + ".")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
