#!/usr/bin/env python3
"""A SentencePiece-vocabulary GGUF (the `llama` tokenizer model of Llama 2 and Mistral GGUFs) and how two
independent tokenizers split text with it, for engine/tests/sentencepiece_gguf.rs.

What it does:
  1. trains a small SentencePiece BPE model (the `sentencepiece` library; 600 pieces, byte fallback,
     digits split, no normalisation, the dummy prefix on, `[INST]`/`[/INST]` as control symbols and
     `<|doc|>` as a user-defined one) on CORPUS below, text written for this fixture;
  2. writes tests/golden/sentencepiece_gguf/spm.gguf: a one-layer random Llama model (hidden 32) with
     that vocabulary as llama.cpp's HF converter writes it (pieces, scores, token types from the model's
     piece kinds, unk/bos/eos ids, add_bos_token, add_space_prefix) and a chat template of Llama 2's
     and Mistral's manner with a system turn;
  3. tokenises TEXTS with llama.cpp (`llama-tokenize` on the GGUF: specials parsed, no BOS) and with
     sentencepiece itself (`encode`, which knows no specials in text), into expected.json.

Needs: gguf, numpy, sentencepiece (tests/reference/venv.sh) and llama-tokenize
(tests/reference/build_llama_cpp.sh). Run from anywhere:
  "$(tests/reference/venv.sh)" tests/reference/sentencepiece_gguf.py
"""

import importlib.metadata
import io
import json
import sys
from pathlib import Path

import gguf
import numpy as np
import sentencepiece as spm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gguf_write  # noqa: E402
import llama_tokenize  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests/golden/sentencepiece_gguf"

CORPUS = """docqa answers questions about long documents: contracts, filings, papers and transcripts.
It chunks each document at sentence boundaries and indexes the chunks for search.
For each question it chooses between reading retrieved passages and reading the whole document.
The answer cites the document, the page and the span it comes from.
The quarterly report lists revenue of 12,345 thousand and costs of 6,789 thousand in 2024.
Section 3.14 of the agreement says the term ends on 31 December 2027 unless renewed.
Meeting notes: the team agreed to ship the release on Tuesday and to review it on Friday.
合同规定，期限为三年，到期后可以续签。
会议纪要：团队同意在星期二发布新版本。
文档问答系统会引用原文的页码和段落。
""" * 20

# A chat template in the manner of Llama 2's and Mistral's, with a system turn (no fixture text is a
# model's own template).
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] }}\n\n"
    "{% elif message['role'] == 'user' %}[INST] {{ message['content'] }} [/INST]"
    "{% else %} {{ message['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
)

TEXTS = [
    "Hello world",
    "The answer cites the document and the page.",
    "  two leading spaces and  double spaces",
    "digits 12345 and 3.14159",
    "合同期限为三年。",
    "Mixed 中文 and English.",
    "an emoji \U0001F642 and a rare char \u00e9",
    "line one\nline two\ttabbed",
    "[INST] What does the contract say? [/INST]",
    "<|doc|>quarterly report",
    "trailing space ",
    "",
]


def train() -> spm.SentencePieceProcessor:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS.splitlines()),
        model_writer=model,
        model_type="bpe",
        vocab_size=600,
        byte_fallback=True,
        split_digits=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        allow_whitespace_only_pieces=True,
        control_symbols=["[INST]", "[/INST]"],
        user_defined_symbols=["<|doc|>"],
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
    )
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def token_type(sp: spm.SentencePieceProcessor, i: int) -> gguf.TokenType:
    if sp.IsUnknown(i):
        return gguf.TokenType.UNKNOWN
    if sp.IsControl(i):
        return gguf.TokenType.CONTROL
    if sp.IsUnused(i):
        return gguf.TokenType.UNUSED
    if sp.IsByte(i):
        return gguf.TokenType.BYTE
    piece = sp.IdToPiece(i)
    return gguf.TokenType.USER_DEFINED if piece == "<|doc|>" else gguf.TokenType.NORMAL


def write_gguf(sp: spm.SentencePieceProcessor, path: Path) -> None:
    vocab, hidden, ffn = sp.GetPieceSize(), 32, 64
    rng = np.random.default_rng(7)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("docqa sentencepiece fixture")
    writer.add_context_length(256)
    writer.add_embedding_length(hidden)
    writer.add_block_count(1)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_rope_dimension_count(hidden // 4)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list([sp.IdToPiece(i) for i in range(vocab)])
    writer.add_token_scores([sp.GetScore(i) for i in range(vocab)])
    writer.add_token_types([token_type(sp, i) for i in range(vocab)])
    writer.add_unk_token_id(sp.unk_id())
    writer.add_bos_token_id(sp.bos_id())
    writer.add_eos_token_id(sp.eos_id())
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(True)
    writer.add_chat_template(CHAT_TEMPLATE)
    shapes = {
        "token_embd.weight": (vocab, hidden),
        "output_norm.weight": (hidden,),
        "output.weight": (vocab, hidden),
        "blk.0.attn_norm.weight": (hidden,),
        "blk.0.attn_q.weight": (hidden, hidden),
        "blk.0.attn_k.weight": (hidden // 2, hidden),
        "blk.0.attn_v.weight": (hidden // 2, hidden),
        "blk.0.attn_output.weight": (hidden, hidden),
        "blk.0.ffn_norm.weight": (hidden,),
        "blk.0.ffn_gate.weight": (ffn, hidden),
        "blk.0.ffn_up.weight": (ffn, hidden),
        "blk.0.ffn_down.weight": (hidden, ffn),
    }
    for name, shape in shapes.items():
        values = np.ones(shape) if len(shape) == 1 else rng.normal(0, 0.1, shape)
        writer.add_tensor(name, values.astype(np.float32))
    gguf_write.finish(writer)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    sp = train()
    path = OUT / "spm.gguf"
    write_gguf(sp, path)
    cases = [
        {"text": t, "llama_cpp": llama_tokenize.tokenize(path, t), "sentencepiece": sp.encode(t)}
        for t in TEXTS
    ]
    meta = {
        "gguf": importlib.metadata.version("gguf"),
        "sentencepiece": importlib.metadata.version("sentencepiece"),
        "llama_cpp_python": (ROOT / ".cache/llama.cpp/VERSION").read_text().strip(),
        "vocab_size": sp.GetPieceSize(),
    }
    (OUT / "expected.json").write_text(json.dumps({"meta": meta, "cases": cases}, ensure_ascii=False, indent=1) + "\n")
    agree = sum(c["llama_cpp"] == c["sentencepiece"] for c in cases)
    print(f"wrote {path} and expected.json: llama.cpp and sentencepiece agree on {agree} of {len(cases)} texts")
    for c in cases:
        if c["llama_cpp"] != c["sentencepiece"]:
            print("  differ:", repr(c["text"]), c["llama_cpp"], c["sentencepiece"])


if __name__ == "__main__":
    main()
