"""Builds the reader's training examples from normalised training documents.

Each example is a prompt exactly as docqa renders it (prompts.py) and the answer the reader should
write. The mixture teaches what a document reader must do:

- rag-answer: a question with passages chosen the way docqa fills its window (BM25 over sentence
  chunks; the passage holding the answer included most of the time), answered with the shortest
  supported answer and the number of the passage it comes from, e.g. `1066 [3]`; when the window ends
  up without the answer (retrieval missed it), the target is the refusal, as it should be; when a
  document is shorter than the window (a tweet, a short story), chunks of other documents of the same
  source fill the rest, as when a question is asked of a collection;
- rag-unanswerable: SQuAD 2.0 questions written to look answerable from a paragraph, with that
  paragraph in the window: the refusal;
- rag-gold-removed: a question whose passages come from its own document, but without the chunks that
  hold the answer (retrieval missed it): the refusal;
- rag-other-document: a question with passages retrieved from another document of the same source:
  the refusal;
- rag-swapped: a question about its document with one name or number swapped for one the document
  never mentions, its passages in the window (SQuAD 2.0's hardest unanswerables are of this kind):
  the refusal;
- rag-choice / long-choice: a question with lettered options, as multiple-choice questions come
  (the other options are answers to other questions on the same document): the letter and its text;
- long-answer / long-unanswerable: the long path's prompt over a stretch of the document (the whole
  document when short), answered without passage numbers.

    python3 training/pipeline/examples.py --normalised DIR --model-dir MODEL_DIR --out examples.jsonl.gz

Input: the `*.jsonl.gz` files of training/data's normalise.py. Output: gzipped JSON lines
`{"source", "kind", "language", "prompt", "target"}`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sys
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chunking import Bm25, chunk  # noqa: E402
from prompts import TEXTS, ChatTemplate, render  # noqa: E402

NOT_FOUND = TEXTS["not_found"]

# Examples per source (the normalised files whose names start with the key) and kind, before --scale.
# A kind asking for more examples than its source has questions goes round them again (SQuALITY's
# questions have four reference answers each). Sources absent from --normalised are skipped.
MIXTURE = {
    "squad2": {"rag-answer": 6000, "rag-unanswerable": 2600, "rag-gold-removed": 600,
               "rag-other-document": 900, "long-answer": 700, "long-unanswerable": 400},
    "cmrc2018": {"rag-answer": 2600, "rag-gold-removed": 300, "rag-other-document": 500, "long-answer": 500},
    "fairytaleqa": {"rag-answer": 3400, "rag-gold-removed": 300, "rag-other-document": 300,
                    "rag-swapped": 2000, "rag-choice": 700, "long-answer": 800, "long-choice": 150},
    "tweetqa": {"rag-answer": 2500, "rag-other-document": 300, "rag-swapped": 500, "long-answer": 300},
    "qmsum": {"rag-answer": 1100, "rag-choice": 200},
    "squality": {"rag-answer": 700},
}
# Sources without an entry of their own (other public training sets added to training/data).
DEFAULT_MIXTURE = {"rag-answer": 2000, "rag-unanswerable": 600, "rag-other-document": 300,
                   "long-answer": 300, "long-unanswerable": 100}
# RAG windows drawn for examples (prompt and answer): docqa's default (2,048) most often, and none past
# 4,096, where the reader's scores fall (BENCHMARKS.md, "quality against window") and an example costs
# two to four times the tokens of one at the default.
WINDOWS = [1024, 1536, 2048, 2048, 2048, 3072, 4096]
ANSWER_ALLOWANCE = 48
PROMPT_OVERHEAD = 110  # system message, template and question, roughly
MAX_TARGET_SENTENCES = 3
OTHER_DOCUMENTS = 6  # documents of the same source drawn per document, for negatives and fillers

_worker = {}


def init_worker(model_dir: str):
    from tokenizers import Tokenizer

    _worker["tok"] = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    _worker["chat"] = ChatTemplate(Path(model_dir))


def count_tokens(texts: list[str]) -> list[int]:
    return [len(e.ids) for e in _worker["tok"].encode_batch(texts, add_special_tokens=False)]


def title_of(doc) -> str:
    """The document's title, else its id, as docqa titles a file without one by its name."""
    return doc.get("title") or doc["id"]


def span_of(text: str, needle: str) -> tuple[int, int] | None:
    at = text.find(needle) if needle else -1
    return (at, at + len(needle)) if at >= 0 else None


def overlaps(c, span) -> bool:
    return span is not None and c.start < span[1] and span[0] < c.end


def short_answer(answer: str) -> str:
    parts = [p for p in answer.replace("\n", " ").split(". ") if p.strip()]
    text = ". ".join(parts[:MAX_TARGET_SENTENCES]).strip()
    return text if text.endswith((".", "!", "?", "。")) or len(parts) <= 1 else text + "."


def pages_for(chunks, rng) -> list[tuple[int, int]]:
    if rng.random() < 0.7:
        return [(1, 1)] * len(chunks)
    per_page = rng.choice([2, 3, 4])
    out = []
    for c_index in range(len(chunks)):
        first = c_index // per_page + 1
        last = first + (1 if rng.random() < 0.15 else 0)
        out.append((first, last))
    return out


def pack(order, chunks, budget, forced=()):
    chosen, used = [], 0
    for i in list(forced) + [i for i in order if i not in forced]:
        if i in chosen:
            continue
        if used + chunks[i].tokens + 12 <= budget:
            chosen.append(i)
            used += chunks[i].tokens + 12
    return sorted(chosen)


def citation(numbers) -> str:
    return "[" + ", ".join(str(n) for n in numbers) + "]" if numbers else ""


def rag_example(doc, q, kind, rng, others):
    window = rng.choice(WINDOWS)
    budget = window - ANSWER_ALLOWANCE - PROMPT_OVERHEAD - len(q["question"]) // 3
    if kind == "rag-other-document" and not others:
        return None
    src = others[0] if kind == "rag-other-document" else doc
    chunks = src["_chunks"]
    evidence = [span_of(src["text"], e) for e in q.get("evidence", [])] if src is doc else []
    gold = [i for i, c in enumerate(chunks) if any(overlaps(c, s) for s in evidence)]
    answers = [a for a in q.get("answers", []) if a.strip()]
    query = q["question"]
    if q["kind"] == "free-form" and not gold and answers and rng.random() < 0.5:
        query = q["question"] + " " + answers[0]  # summary questions: passages that support the answer
    order = Bm25([c.text for c in chunks]).ranking(query)
    forced = []
    if kind == "rag-gold-removed":
        holding = {i for i, c in enumerate(chunks) if any(a in c.text for a in answers)}
        if not gold and not holding:
            return None
        order = [i for i in order if i not in set(gold) | holding]
    elif kind == "rag-unanswerable" or (q["kind"] == "free-form" and gold):
        forced = gold[:3]
    elif kind == "rag-answer" and gold and rng.random() < 0.85:
        forced = gold[:1]
    chosen = pack(order, chunks, budget, forced)
    if not chosen:
        return None
    pages = pages_for(chunks, rng)
    own = [{"title": title_of(src), "pages": list(pages[i]), "text": chunks[i].text, "chunk": i} for i in chosen]
    groups = [own] + fillers(src, others, q, answers, budget - sum(chunks[i].tokens + 12 for i in chosen), rng)
    rng.shuffle(groups)
    sources = [s for g in groups for s in g]
    number = {s["chunk"]: n for n, s in enumerate(sources, 1) if "chunk" in s}
    target = rag_target(q, kind, chunks, chosen, gold, answers, number, rng)
    if target is None:
        return None
    for s in sources:
        s.pop("chunk", None)
    return {"route": "rag", "question": q["question"], "sources": sources}, target


def fillers(src, others, q, answers, room, rng):
    """Chunks of other documents filling a window the question's document leaves mostly empty."""
    if room < 400 or rng.random() < 0.2:
        return []
    groups = []
    for other in others:
        if other is src or room < 100:
            continue
        picked = []
        for i in Bm25([c.text for c in other["_chunks"]]).ranking(q["question"]):
            c = other["_chunks"][i]
            if c.tokens + 12 <= room and not any(a in c.text for a in answers):
                picked.append(i)
                room -= c.tokens + 12
            if room < 100 or len(picked) >= 4:
                break
        pages = pages_for(other["_chunks"], rng)
        groups.append([{"title": title_of(other), "pages": list(pages[i]), "text": other["_chunks"][i].text}
                       for i in sorted(picked)])
    return [g for g in groups if g]


def rag_target(q, kind, chunks, chosen, gold, answers, number, rng):
    if kind in ("rag-unanswerable", "rag-other-document", "rag-gold-removed"):
        if any(a in chunks[i].text for a in answers for i in chosen):
            return None  # the passages happen to hold the answer after all
        return NOT_FOUND
    if q["kind"] == "extractive":
        holding = [i for i in chosen if any(a in chunks[i].text for a in answers)]
        best = [i for i in holding if i in gold][:1] or holding[:1]
        if not best:
            return NOT_FOUND
        answer = next(a for a in answers if a in chunks[best[0]].text)
        return f"{answer} {citation([number[best[0]]])}"
    answer = short_answer(rng.choice(answers) if q.get("source") == "squality" else answers[0])
    cited = [i for i in chosen if i in gold][:3]
    if not cited:
        scores = Bm25([chunks[i].text for i in chosen]).scores(answer)
        best = sorted(range(len(chosen)), key=lambda k: -scores[k])[:2]
        cited = [chosen[k] for k in best if scores[k] > 0]
    return f"{answer} {citation(sorted(number[i] for i in cited))}".strip()


def long_example(doc, q, kind, rng):
    chunks = doc["_chunks"]
    limit = rng.choice([1024, 2048, 3072])
    evidence = [span_of(doc["text"], e) for e in q.get("evidence", [])]
    gold = [i for i, c in enumerate(chunks) if any(overlaps(c, s) for s in evidence)]
    answers = [a for a in q.get("answers", []) if a.strip()]
    if sum(c.tokens for c in chunks) <= limit:
        first, last = 0, len(chunks) - 1
    elif gold:
        first = last = rng.choice(gold)
        while True:
            grow = [i for i in (first - 1, last + 1) if 0 <= i < len(chunks)]
            if not grow:
                break
            pick = rng.choice(grow)
            span_tokens = sum(c.tokens for c in chunks[min(first, pick):max(last, pick) + 1])
            if span_tokens > limit:
                break
            first, last = min(first, pick), max(last, pick)
    else:
        return None
    text = doc["text"][chunks[first].start:chunks[last].end]
    if kind == "long-unanswerable":
        target = NOT_FOUND
    elif q["kind"] == "extractive":
        present = [a for a in answers if a in text]
        if not present:
            return None
        target = present[0]
    else:
        target = short_answer(rng.choice(answers) if q.get("source") == "squality" else answers[0])
    example = {"route": "long", "question": q["question"], "documents": [{"title": title_of(doc), "text": text}]}
    return example, target


_NAME_OR_NUMBER = re.compile(r"\b(?:[A-Z][a-z]{2,}|\d{2,})\b")
LETTERS = "ABCD"


def swapped(q, doc, others, rng):
    """`q` with one name or number that its document holds replaced by one the document never holds."""
    here = [m for m in _NAME_OR_NUMBER.finditer(q["question"]) if m.start() > 0 and m.group() in doc["text"]]
    if not here or not others:
        return None
    m = rng.choice(here)
    kind = str.isdigit if m.group().isdigit() else str.istitle
    pool = {w for o in others for w in _NAME_OR_NUMBER.findall(o["text"][:20000])
            if kind(w) and w not in doc["text"]}
    if not pool:
        return None
    text = q["question"][: m.start()] + rng.choice(sorted(pool)) + q["question"][m.end():]
    return dict(q, question=text, kind="unanswerable", answers=[])


def with_choices(q, doc, rng):
    """`q` as a multiple-choice question whose wrong options answer other questions on the document."""
    right = q["answers"][0].strip()
    wrong = list({a["answers"][0].strip() for a in doc["questions"]
                  if a.get("answers") and a["answers"][0].strip() not in ("", right)})
    if len(wrong) < 3:
        return None
    options = rng.sample(wrong, 3)
    at = rng.randrange(4)
    options.insert(at, right)
    listed = "".join(f"\n ({LETTERS[i]}) {o} " for i, o in enumerate(options))
    letter = LETTERS[at]
    return dict(q, question=f"{q['question']}\n{listed}", kind="free-form", answers=[f"({letter}) {right}"])


def transformed(doc, q, kind, others, rng):
    """The question a kind asks, and the kind whose layout builds its example."""
    if kind == "rag-swapped":
        return swapped(q, doc, others, rng), "rag-unanswerable"
    if kind in ("rag-choice", "long-choice"):
        return with_choices(q, doc, rng), kind.replace("choice", "answer")
    return q, kind


def build_for_document(job):
    doc, others, tasks, seed = job
    rng = random.Random(seed)
    cache = _worker.setdefault("chunks", {})
    for d in [doc, *others]:
        if d["id"] not in cache:
            cache[d["id"]] = chunk(d["text"], count_tokens)
        d["_chunks"] = cache[d["id"]]
    out = []
    for q, named in tasks:
        q, kind = transformed(doc, q, named, others, rng)
        if q is None:
            continue
        made = (long_example(doc, q, kind, rng) if kind.startswith("long")
                else rag_example(doc, q, kind, rng, others))
        if made is None:
            continue
        example, target = made
        out.append({
            "source": doc["source"], "kind": named if target != NOT_FOUND or named != "rag-answer" else "rag-missed",
            "language": doc.get("language", "en"),
            "prompt": render(_worker["chat"], example), "target": target,
        })
    return out


def eligible(q, kind) -> bool:
    if kind in ("rag-unanswerable", "long-unanswerable"):
        return q["kind"] == "unanswerable" and bool(q.get("evidence"))
    if kind == "rag-swapped":
        return q["kind"] == "extractive" and bool(q.get("evidence"))
    if kind in ("rag-choice", "long-choice"):
        return q["kind"] != "unanswerable" and bool(q.get("answers")) and bool(q.get("evidence"))
    if kind in ("rag-other-document", "rag-gold-removed"):
        # only questions tied to their document: "Summarize the meeting" is answerable from any meeting
        return q["kind"] != "unanswerable" and bool(q.get("evidence") or q["kind"] == "extractive")
    return q["kind"] != "unanswerable" and bool(q.get("answers"))


def as_span_question(q, text):
    """A free-form question whose short answer occurs verbatim in the document, as an extractive one."""
    spans = [a for a in q.get("answers", []) if 0 < len(a) <= 80 and a in text]
    if q["kind"] == "free-form" and spans:
        return dict(q, kind="extractive", answers=spans)
    return q


def plan(docs, mixture, scale, rng):
    """(document index, question, kind) triples drawn per source and kind, without repeats per kind."""
    tasks = {}
    for kind, count in mixture.items():
        pool = [(d, q) for d, doc in enumerate(docs)
                for q in (as_span_question(q, doc["text"]) for q in doc["questions"]) if eligible(q, kind)]
        rng.shuffle(pool)
        wanted = int(count * scale)
        for k in range(min(wanted, 3 * len(pool))):
            d, q = pool[k % len(pool)]
            tasks.setdefault(d, []).append((dict(q, source=docs[d]["source"].split("_")[0]), kind))
    return tasks


def sources(folder: Path) -> dict[str, list[Path]]:
    """The normalised files by source: the mixture's names by prefix, any other file by its own name."""
    out = {}
    for path in sorted(folder.glob("*.jsonl.gz")):
        name = path.name.removesuffix(".jsonl.gz")
        key = next((k for k in MIXTURE if name.startswith(k)), name)
        out.setdefault(key, []).append(path)
    return out


def read_source(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--normalised", required=True, type=Path)
    ap.add_argument("--model-dir", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every count of the mixture")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=8)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    jobs = []
    for source, paths in sources(args.normalised).items():
        mixture = MIXTURE.get(source, DEFAULT_MIXTURE)
        docs = [d for path in paths for d in read_source(path)]
        for d, tasks in plan(docs, mixture, args.scale, rng).items():
            candidates = [i for i in range(len(docs)) if i != d]
            others = [docs[i] for i in rng.sample(candidates, min(OTHER_DOCUMENTS, len(candidates)))]
            jobs.append((docs[d], others, tasks, rng.randrange(1 << 30)))
    counts = {}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with Pool(args.workers, initializer=init_worker, initargs=(str(args.model_dir),)) as pool, \
            gzip.open(args.out, "wt", encoding="utf-8") as out:
        for examples in pool.imap_unordered(build_for_document, jobs, chunksize=1):
            for e in examples:
                out.write(json.dumps(e, ensure_ascii=False) + "\n")
                key = (e["source"], e["kind"])
                counts[key] = counts.get(key, 0) + 1
    for (source, kind), n in sorted(counts.items()):
        print(f"{source:20} {kind:20} {n:6}")
    print(f"total {sum(counts.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
