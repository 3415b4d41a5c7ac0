"""docqa's prompts, rendered in Python for training the reader.

The texts come from services/src/qa/prompts.json, the file the service itself compiles in; the chat
template comes from the model directory's tokenizer_config.json, the one docqa renders. A test in the
service (`the_training_pipeline_renders_prompts_exactly_as_the_service_does`) renders the same examples
through `docqa`'s code and through this module and requires equal text, so training and serving cannot
drift.

    python3 training/pipeline/prompts.py render --model-dir MODEL_DIR < examples.jsonl > prompts.jsonl

Examples are JSON lines in `docqa prompt-dump`'s input format.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROMPTS_JSON = ROOT / "services" / "src" / "qa" / "prompts.json"

_PLACEHOLDER = re.compile(r"\{([A-Za-z_]+)\}")


def load_texts(path: Path = PROMPTS_JSON) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


TEXTS = load_texts()


def fill(template: str, **values: str) -> str:
    """Replaces each {name} given in one pass; other braces stay (as the service's `fill`)."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def source_block(number: int, title: str, pages: tuple[int, int], text: str) -> str:
    first, last = pages
    if first == last:
        where = fill(TEXTS["one_page"], page=str(first))
    else:
        where = fill(TEXTS["page_range"], first=str(first), last=str(last))
    return fill(TEXTS["source_block"], number=str(number), title=title, pages=where, text=text.strip())


def rag_user(blocks: str, question: str) -> str:
    return fill(TEXTS["rag_user"], sources=blocks, question=question.strip())


def long_documents(docs: list[tuple[str, str]]) -> str:
    parts = []
    for i, (title, text) in enumerate(docs):
        if len(docs) == 1:
            parts.append(fill(TEXTS["long_document"], title=title, text=text.strip()))
        else:
            parts.append(
                fill(TEXTS["long_document_numbered"], number=str(i + 1), title=title, text=text.strip())
            )
    return "".join(parts) + TEXTS["long_question_marker"]


class ChatTemplate:
    """The model directory's chat template (Jinja), rendered as HF transformers renders it."""

    def __init__(self, model_dir: Path):
        import jinja2  # imported here so the module's pure parts need nothing installed

        config = json.loads((Path(model_dir) / "tokenizer_config.json").read_text(encoding="utf-8"))
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
        self.template = env.from_string(config["chat_template"])
        self.special = {k: v for k, v in config.items() if k.endswith("_token") and isinstance(v, str)}

    def render(self, system: str, user: str) -> str:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return self.template.render(messages=messages, add_generation_prompt=True, **self.special)


def render(chat: ChatTemplate, example: dict) -> str:
    if example["route"] == "rag":
        blocks = "".join(
            source_block(i + 1, s["title"], tuple(s.get("pages", (1, 1))), s["text"])
            for i, s in enumerate(example["sources"])
        )
        return chat.render(TEXTS["rag_system"], rag_user(blocks, example["question"]))
    docs = [(d["title"], d["text"]) for d in example["documents"]]
    user = long_documents(docs) + " " + example["question"].strip()
    return chat.render(TEXTS["long_system"], user)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("render", help="render examples (JSON lines on stdin) to {prompt} lines")
    r.add_argument("--model-dir", required=True, type=Path)
    args = parser.parse_args()
    chat = ChatTemplate(args.model_dir)
    for line in sys.stdin:
        if line.strip():
            print(json.dumps({"prompt": render(chat, json.loads(line))}, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
