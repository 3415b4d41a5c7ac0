#!/usr/bin/env python3
"""Normalise public QA *training* splits into docqa's eval dataset format.

Python 3.11 standard library only. Each source is read from a checkout of its
public repository (see training/data/README.md for the clone URLs and commits)
and written as one gzipped JSON Lines file, one document per line:

  {"id", "source", "split", "license", "title", "text", "language",
   "questions": [{"id", "question", "answers", "kind", "evidence"}]}

kind is "extractive", "free-form" or "unanswerable". evidence holds exact
substrings of text where the source gives them.

Usage (any subset of sources):

  python3 training/data/normalise.py --out .cache/training-data/normalised \
      --squad PATH/train-v2.0.json \
      --fairytaleqa PATH/FairytaleQAData \
      --cmrc PATH/cmrc2018_train.json \
      --qmsum PATH/QMSum \
      --squality PATH/SQuALITY \
      --subjqa PATH/SubjQA [--subjqa-domains electronics,grocery,restaurants,tripadvisor] \
      --c3 PATH/c3 \
      --tweetqa PATH/TweetQA/origin_data/train.json \
      [--exclude training/data/excluded.json]

--exclude names a JSON file {"<source>": ["doc id", ...], ...} of documents to
leave out (written by `overlap.py filter`: training documents that share text
with the development/evaluation data). Also writes SOURCES.json into --out: per
source the repository, commit, paths and licence (PROVENANCE below; --provenance
FILE overrides entries) with the counts of documents and questions by kind.
"""

from __future__ import annotations

import argparse
import collections
import csv
import glob
import gzip
import hashlib
import json
import os
import re
import sys

LICENSES = {
    "squad2_train": "CC BY-SA 4.0 (SQuAD 2.0, Rajpurkar et al. 2018; Wikipedia text)",
    "squad1_train": "CC BY-SA 4.0 (SQuAD 1.1, Rajpurkar et al. 2016; Wikipedia text)",
    "fairytaleqa": "Apache-2.0 (FairytaleQA, Xu et al. 2022, github.com/uci-soe/FairytaleQAData); "
                   "stories public domain (Project Gutenberg)",
    "cmrc2018_train": "CC BY-SA 4.0 (CMRC 2018, Cui et al. 2019, github.com/ymcui/cmrc2018; Chinese Wikipedia)",
    "qmsum_train": "MIT (QMSum, Zhong et al. 2021, github.com/Yale-LILY/QMSum); transcripts from "
                   "AMI/ICSI (CC BY 4.0) and Welsh/Canadian parliament committees",
    "squality_train": "CC BY 4.0 (SQuALITY questions/answers, Wang et al. 2022, "
                      "github.com/nyu-mll/SQuALITY); story text: Project Gutenberg license",
    "subjqa_train": "no licence stated (SubjQA, Bjerva et al. 2020, github.com/megagonlabs/SubjQA: no LICENSE file; "
                    "research dataset); reviews from the Amazon product review, TripAdvisor and Yelp datasets",
    "c3_train": "non-commercial research use only (C3, Sun et al. 2020, github.com/nlpdata/c3, license.txt)",
    "tweetqa_train": "CC BY-SA 4.0 (TweetQA, Xiong et al. 2019); tweets remain their authors' (Twitter terms)",
}


# Where each source comes from: public GitHub repositories at the commit used for the files in
# .cache/training-data/normalised (README.md says how to check them out).
PROVENANCE = {
    "fairytaleqa_trainval": {
        "repo": "https://github.com/uci-soe/FairytaleQAData",
        "commit": "a24ddc17364666b7c13a425b9970c87368b03417",
        "paths": ["data-by-train-split/section-stories/train/*-story.csv",
                  "data-by-train-split/questions/train/*-questions.csv",
                  "data-by-train-split/section-stories/val/*-story.csv",
                  "data-by-train-split/questions/val/*-questions.csv"],
        "splits": ["train", "val"],
        "license": "Apache-2.0 (repository LICENSE); stories are public-domain fairy tales (Project Gutenberg)",
    },
    "qmsum_train": {
        "repo": "https://github.com/Yale-LILY/QMSum",
        "commit": "83d7768c1f2b4dfeb091385d3dc7e239b8e5bb7e",
        "paths": ["data/ALL/train/*.json"],
        "splits": ["train"],
        "license": "MIT (repository LICENSE); transcripts from the AMI and ICSI meeting corpora (CC BY 4.0) "
                   "and Welsh Parliament / Parliament of Canada committee records",
    },
    "squality_train": {
        "repo": "https://github.com/nyu-mll/SQuALITY",
        "commit": "dc08d4f574639d773bc64ef3ab3527043108fb4e",
        "paths": ["data/v1-3/txt/train.jsonl"],
        "splits": ["train"],
        "license": "questions and responses CC BY 4.0 (data/LICENSE); stories Project Gutenberg license "
                   "(data/GUTENBERG_LICENSE)",
    },
    "squad2_train": {
        "repo": "https://github.com/rajpurkar/SQuAD-explorer",
        "commit": "eee5fdbf62f8613a7812b03419e6b29617b74fd1",
        "paths": ["dataset/train-v2.0.json"],
        "md5": "62108c273c268d70893182d5cf8df740",
        "splits": ["train"],
        "license": "CC BY-SA 4.0 (SQuAD dataset; Wikipedia text)",
    },
    "subjqa_train": {
        "repo": "https://github.com/megagonlabs/SubjQA",
        "commit": "6ea88c77802798b4a09a8218bd6bbde5b9cf4278",
        "paths": ["SubjQA/electronics/splits/train.csv", "SubjQA/grocery/splits/train.csv",
                  "SubjQA/restaurants/splits/train.csv", "SubjQA/tripadvisor/splits/train.csv"],
        "md5": {"SubjQA/electronics/splits/train.csv": "1615d1608a78f5f9757af006eef0d1bb",
                "SubjQA/grocery/splits/train.csv": "947af5eb9ff0f791a6bcff0aadcbe4bf",
                "SubjQA/restaurants/splits/train.csv": "823cfdcc5ddac1638c9157a82950fc22",
                "SubjQA/tripadvisor/splits/train.csv": "c6ebff530978671cbc81f00f476bc56c"},
        "splits": ["train"],
        "license": "no licence file in the repository (the Hugging Face copy says 'unknown'); research dataset "
                   "(Bjerva et al., EMNLP 2020); reviews from the Amazon review, TripAdvisor and Yelp datasets",
        "note": "books and movies train.csv (over 4 MiB each) not included in the current build",
    },
    "c3_train": {
        "repo": "https://github.com/nlpdata/c3",
        "commit": "1f41682ebb684d63afe7c583c8f38e137fc8a826",
        "paths": ["data/c3-d-train.json", "data/c3-m-train.json"],
        "md5": {"data/c3-d-train.json": "291b07679bef785aa66bb5343f1b49b2",
                "data/c3-m-train.json": "db321e631eb3e6f508e438992652618f"},
        "splits": ["train"],
        "license": "'C3 dataset is intended for non-commercial research purpose only.' (repository license.txt)",
        "note": "multiple choice; only questions whose correct option occurs verbatim in the document, as extractive",
    },
    "tweetqa_train": {
        "repo": "https://github.com/huangjingxian/TweetQA",
        "commit": "5ec673faae62c48aa3b0f6290adc8140bf468f7c",
        "paths": ["origin_data/train.json"],
        "md5": {"origin_data/train.json": "6770e528e765b122133031aaf3bc1d32"},
        "splits": ["train"],
        "license": "CC BY-SA 4.0 (TweetQA, Xiong et al., ACL 2019, as published with the dataset); tweets are "
                   "their authors' (Twitter terms)",
        "note": "a third-party copy of the official TweetQA train split (10,692 questions, as the official "
                "release); only questions whose answer occurs in the tweet (case-insensitive) are kept",
    },
    "cmrc2018_train": {
        "repo": "https://github.com/ymcui/cmrc2018",
        "commit": "c0eb1b6ba219847457e6af3180da722bbeb656af",
        "paths": ["squad-style-data/cmrc2018_train.json"],
        "splits": ["train"],
        "license": "CC BY-SA 4.0 (repository LICENCE; Chinese Wikipedia text)",
    },
}


def dedup(items):
    out, seen = [], set()
    for x in items:
        if x is None:
            continue
        x = x.strip() if isinstance(x, str) else x
        if not x or x in seen:
            continue
        seen.add(x)
        out.append(x)
    return out


# ----------------------------------------------------------------- SQuAD / CMRC
def squad_style(path, source, language, id_prefix, split="train"):
    """SQuAD-format JSON ({"data": [{"title", "paragraphs": [{"context", "qas"}]}]}),
    one document per article, paragraphs joined by a blank line."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)["data"]
    for ai, art in enumerate(data):
        paras = [p["context"] for p in art["paragraphs"]]
        text = "\n\n".join(paras)
        questions = []
        for p in art["paragraphs"]:
            ctx = p["context"]
            for qa in p["qas"]:
                answers = dedup(a["text"] for a in qa.get("answers", []))
                impossible = bool(qa.get("is_impossible", False)) or not answers
                questions.append({
                    "id": qa["id"],
                    "question": qa["question"].strip(),
                    "answers": [] if impossible else answers,
                    "kind": "unanswerable" if impossible else "extractive",
                    # for unanswerable questions: the paragraph it was written against
                    "evidence": [ctx],
                })
        title = art.get("title") or (art["paragraphs"][0].get("id", "") if art["paragraphs"] else "")
        yield {
            "id": f"{id_prefix}-{ai:04d}",
            "source": source,
            "split": split,
            "license": LICENSES[source],
            "title": title.replace("_", " ") if language == "en" else title,
            "text": text,
            "language": language,
            "questions": questions,
        }


# ----------------------------------------------------------------- FairyTaleQA
def fairytaleqa(root, splits=("train", "val")):
    base = os.path.join(root, "data-by-train-split")
    for split in splits:
        qdir = os.path.join(base, "questions", split)
        sdir = os.path.join(base, "section-stories", split)
        for qpath in sorted(glob.glob(os.path.join(qdir, "*-questions.csv"))):
            name = os.path.basename(qpath)[: -len("-questions.csv")]
            spath = os.path.join(sdir, name + "-story.csv")
            with open(spath, encoding="utf-8", newline="") as f:
                sections = {}
                order = []
                for row in csv.DictReader(f):
                    key = row["section"].strip()
                    sections[key] = row["text"].strip()
                    order.append(key)
            text = "\n\n".join(sections[k] for k in order)
            questions = []
            with open(qpath, encoding="utf-8", newline="") as f:
                for qi, row in enumerate(csv.DictReader(f)):
                    cols = ["answer1", "answer4", "answer2", "answer3", "answer5", "answer6"]
                    answers = dedup(row.get(c) for c in cols)
                    ev = []
                    for s in re.split(r"[,;\s]+", (row.get("cor_section") or "").strip()):
                        if s in sections and sections[s] not in ev:
                            ev.append(sections[s])
                    qid = (row.get("question_id") or str(qi + 1)).strip()
                    if not answers or not row["question"].strip():
                        continue
                    questions.append({
                        "id": f"fairytaleqa-{split}-{name}-q{qid}",
                        "question": row["question"].strip(),
                        "answers": answers,
                        "kind": "free-form",
                        "evidence": ev,
                    })
            title = name.replace("-", " ").strip()
            title = title[:1].upper() + title[1:]
            yield {
                "id": f"fairytaleqa-{split}-{name}",
                "source": "fairytaleqa",
                "split": split,
                "license": LICENSES["fairytaleqa"],
                "title": title,
                "text": text,
                "language": "en",
                "questions": questions,
            }


# ----------------------------------------------------------------- QMSum
def qmsum(root, split="train"):
    for path in sorted(glob.glob(os.path.join(root, "data", "ALL", split, "*.json"))):
        name = os.path.basename(path)[:-5]
        with open(path, encoding="utf-8") as f:
            m = json.load(f)
        lines = [f"{t['speaker']}: {t['content']}" for t in m["meeting_transcripts"]]
        text = "\n".join(lines)
        questions = []
        for i, q in enumerate(m.get("general_query_list", [])):
            questions.append({
                "id": f"qmsum-{split}-{name}-g{i}",
                "question": q["query"].strip(),
                "answers": dedup([q["answer"]]),
                "kind": "free-form",
                "evidence": [],
            })
        for i, q in enumerate(m.get("specific_query_list", [])):
            ev = []
            for a, b in q.get("relevant_text_span", []):
                a, b = int(a), int(b)
                span = "\n".join(lines[a:b + 1])
                if span and span not in ev:
                    ev.append(span)
            questions.append({
                "id": f"qmsum-{split}-{name}-s{i}",
                "question": q["query"].strip(),
                "answers": dedup([q["answer"]]),
                "kind": "free-form",
                "evidence": ev,
            })
        yield {
            "id": f"qmsum-{split}-{name}",
            "source": "qmsum_train",
            "split": split,
            "license": LICENSES["qmsum_train"],
            "title": f"QMSum {split} meeting {name}",
            "text": text,
            "language": "en",
            "questions": [q for q in questions if q["answers"]],
        }


# ----------------------------------------------------------------- SQuALITY
_BOILER = re.compile(r"^(produced by|distributed proofreading|e-text prepared|transcriber|\[transcriber|"
                     r"this etext|online distributed|http)", re.I)


def squality_title(doc):
    """First line of the story that is not a Project Gutenberg production note."""
    for ln in doc.strip().split("\n"):
        ln = ln.strip()
        if not ln or _BOILER.match(ln) or "pgdp.net" in ln.lower() or "proofreading team" in ln.lower():
            continue
        return ln
    return ""


def squality(path, split="train"):
    with open(path, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            pid = r["metadata"]["passage_id"]
            text = r["document"].strip()
            questions = []
            for q in r["questions"]:
                questions.append({
                    "id": f"squality-{split}-{pid}-q{q['question_number']}",
                    "question": q["question_text"].strip(),
                    "answers": dedup(x["response_text"] for x in q["responses"]),
                    "kind": "free-form",
                    "evidence": [],
                })
            yield {
                "id": f"squality-{split}-{pid}",
                "source": "squality_train",
                "split": split,
                "license": LICENSES["squality_train"],
                "title": squality_title(text) or f"SQuALITY {split} story {pid}",
                "text": text,
                "language": "en",
                "questions": questions,
            }


# ----------------------------------------------------------------- SubjQA
SUBJQA_DOMAINS = ("books", "electronics", "grocery", "movies", "restaurants", "tripadvisor")
_NOT_FOUND = "ANSWERNOTFOUND"


def _compact(s):
    """Letters and digits only, lower case: to match SubjQA's tokenised answer text to the review."""
    return "".join(ch for ch in s.lower() if ch.isalnum())


def subjqa(root, domains=SUBJQA_DOMAINS, stats=None):
    """SubjQA (megagonlabs/SubjQA) SubjQA/<domain>/splits/train.csv: one document per review.

    The review column ends with " ANSWERNOTFOUND" (the span annotators chose for "no answer"),
    which is removed. human_ans_spans is tokenised ("It 's"); when it is not a substring of the
    review, the span human_ans_indices gives is used if it holds the same letters and digits,
    else that annotation is dropped. A question (q_review_id) with several annotation rows is
    extractive when any row gives a span, unanswerable when every row says ANSWERNOTFOUND."""
    stats = stats if stats is not None else collections.Counter()
    for domain in domains:
        path = os.path.join(root, "SubjQA", domain, "splits", "train.csv")
        if not os.path.exists(path):
            print(f"warning: SubjQA {domain}: {path} not found, skipped", file=sys.stderr)
            continue
        with open(path, encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
        reviews = {}            # review_id -> [text, item_id, {q_review_id: [question, [answers], n_rows, n_notfound]}]
        for row in rows:
            raw = row["review"]
            text = raw[: -len(_NOT_FOUND)] if raw.endswith(_NOT_FOUND) else raw
            text = text.rstrip()
            rid = row["review_id"]
            if rid not in reviews:
                reviews[rid] = [text, row["item_id"], {}]
            doc = reviews[rid]
            if doc[0] != text:
                stats["review_text_mismatch"] += 1
                continue
            q = doc[2].setdefault(row["q_review_id"], [row["question"].strip(), [], 0, 0])
            q[2] += 1
            ans = row["human_ans_spans"].strip()
            if ans == _NOT_FOUND:
                q[3] += 1
                continue
            span = None
            if ans and ans in text:
                span = ans
            else:
                try:
                    a, b = (int(x) for x in row["human_ans_indices"].strip("() ").split(","))
                    cand = text[a:b].strip()
                except ValueError:
                    cand = ""
                if cand and _compact(cand) == _compact(ans):
                    span = cand
                    stats["span_from_indices"] += 1
            if span:
                q[1].append(span)
            else:
                stats["annotation_dropped"] += 1
        for rid, (text, item, qs) in reviews.items():
            questions = []
            for qid, (question, answers, n, n_nf) in qs.items():
                answers = dedup(answers)
                if answers:
                    kind = "extractive"
                    if n_nf:
                        stats["mixed_annotations"] += 1
                elif n_nf == n:
                    kind = "unanswerable"
                else:
                    stats["question_dropped"] += 1
                    continue
                if not question:
                    continue
                questions.append({
                    "id": f"subjqa-train-{domain}-{qid}",
                    "question": question,
                    "answers": answers,
                    "kind": kind,
                    "evidence": [text],
                })
            if not questions or not text.strip():
                continue
            yield {
                "id": f"subjqa-train-{domain}-{rid}",
                "source": "subjqa_train",
                "split": "train",
                "license": LICENSES["subjqa_train"],
                "title": f"{domain} review ({item})",
                "text": text,
                "language": "en",
                "questions": questions,
            }


# ----------------------------------------------------------------- C3
def c3(root, stats=None):
    """C3 (nlpdata/c3) data/c3-{d,m}-train.json: multiple-choice Chinese reading comprehension.

    One document per item, text = its paragraphs (dialogue turns) joined by "\n". Only questions
    whose correct option occurs verbatim in the document are kept, as extractive questions with
    that option as the answer; evidence = the paragraph(s) holding it."""
    stats = stats if stats is not None else collections.Counter()
    for part, genre in (("d", "dialogue"), ("m", "mixed-genre")):
        path = os.path.join(root, "data", f"c3-{part}-train.json")
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        for paras, qas, did in data:
            paras = [p.strip() for p in paras if p.strip()]
            text = "\n".join(paras)
            questions = []
            for qi, qa in enumerate(qas):
                ans = qa["answer"].strip()
                stats["questions_in_source"] += 1
                if not ans or ans not in text or not qa["question"].strip():
                    stats["not_verbatim"] += 1
                    continue
                questions.append({
                    "id": f"c3-train-{part}-{did}-q{qi}",
                    "question": qa["question"].strip(),
                    "answers": [ans],
                    "kind": "extractive",
                    "evidence": [p for p in paras if ans in p] or [text],
                })
            if not questions:
                stats["documents_without_question"] += 1
                continue
            yield {
                "id": f"c3-train-{part}-{did}",
                "source": "c3_train",
                "split": "train",
                "license": LICENSES["c3_train"],
                "title": f"C3 {genre} {did}",
                "text": text,
                "language": "zh",
                "questions": questions,
            }


# ----------------------------------------------------------------- TweetQA
def tweetqa(path, stats=None):
    """TweetQA train.json ([{"Question", "Answer": [..], "Tweet", "qid"}]): one document per
    distinct tweet. Answers are lower-cased in the source; an answer found in the tweet ignoring
    case is replaced by the tweet's own span (original case) and the question kept as extractive.
    Questions whose answer is not in the tweet (abstractive answers, questions about an image or
    a tweet that is not visible) are left out."""
    stats = stats if stats is not None else collections.Counter()
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    docs = {}
    for r in data:
        tweet = r["Tweet"].strip()
        doc = docs.setdefault(tweet, [])
        stats["questions_in_source"] += 1
        spans = []
        for a in r["Answer"]:
            a = (a or "").strip()
            if not a:
                continue
            if a in tweet:
                spans.append(a)
                continue
            m = re.search(re.escape(a), tweet, re.IGNORECASE)
            if m:
                spans.append(m.group(0))
        spans = dedup(spans)
        if not spans or not r["Question"].strip():
            stats["not_in_tweet"] += 1
            continue
        doc.append({
            "id": f"tweetqa-train-{r['qid']}",
            "question": r["Question"].strip(),
            "answers": spans,
            "kind": "extractive",
            "evidence": [tweet],
        })
    for tweet, questions in docs.items():
        if not questions:
            continue
        did = hashlib.md5(tweet.encode("utf-8")).hexdigest()[:16]
        yield {
            "id": f"tweetqa-train-{did}",
            "source": "tweetqa_train",
            "split": "train",
            "license": LICENSES["tweetqa_train"],
            "title": "",
            "text": tweet,
            "language": "en",
            "questions": questions,
        }


# ----------------------------------------------------------------- driver
def check_doc(doc):
    assert doc["text"], doc["id"]
    for q in doc["questions"]:
        assert q["kind"] in ("extractive", "free-form", "unanswerable"), q
        assert (q["kind"] == "unanswerable") == (not q["answers"]), q["id"]
        for e in q["evidence"]:
            assert e in doc["text"], (doc["id"], q["id"])
        if q["kind"] == "extractive":
            assert any(a in doc["text"] for a in q["answers"]), q["id"]


def write(out_dir, name, docs, exclude):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name + ".jsonl.gz")
    stats = {"documents": 0, "questions": collections.Counter(), "dropped_documents": 0,
             "dropped_questions": 0, "chars": 0, "dropped_ids": []}
    ids = set()
    tmp = path + ".tmp"
    # mtime=0: byte-identical output on every run
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as gz:
        for doc in docs:
            if doc["id"] in exclude:
                stats["dropped_documents"] += 1
                stats["dropped_questions"] += len(doc["questions"])
                stats["dropped_ids"].append(doc["id"])
                continue
            assert doc["id"] not in ids, doc["id"]
            ids.add(doc["id"])
            check_doc(doc)
            stats["documents"] += 1
            stats["chars"] += len(doc["text"])
            for q in doc["questions"]:
                stats["questions"][q["kind"]] += 1
            gz.write((json.dumps(doc, ensure_ascii=False) + "\n").encode("utf-8"))
    os.replace(tmp, path)
    stats["questions"] = dict(sorted(stats["questions"].items()))
    stats["file"] = os.path.basename(path)
    stats["bytes"] = os.path.getsize(path)
    missing = set(exclude) - set(stats["dropped_ids"])
    if missing:
        print(f"warning: {name}: excluded ids not found: {sorted(missing)[:5]}", file=sys.stderr)
    return stats


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder for <source>.jsonl.gz and SOURCES.json")
    ap.add_argument("--squad", help="SQuAD 2.0 train-v2.0.json")
    ap.add_argument("--squad-v1", help="SQuAD 1.1 train-v1.1.json (fallback when 2.0 train is not at hand)")
    ap.add_argument("--fairytaleqa", help="checkout of uci-soe/FairytaleQAData (train and val splits are read)")
    ap.add_argument("--cmrc", help="CMRC 2018 cmrc2018_train.json (SQuAD-style)")
    ap.add_argument("--qmsum", help="checkout of Yale-LILY/QMSum (data/ALL/train is read)")
    ap.add_argument("--squality", help="checkout of nyu-mll/SQuALITY (data/v1-3/txt/train.jsonl is read)")
    ap.add_argument("--subjqa", help="checkout of megagonlabs/SubjQA (SubjQA/<domain>/splits/train.csv is read)")
    ap.add_argument("--subjqa-domains", default=",".join(SUBJQA_DOMAINS),
                    help="comma-separated SubjQA domains (default: all six; a missing one is skipped with a warning)")
    ap.add_argument("--c3", help="checkout of nlpdata/c3 (data/c3-{d,m}-train.json is read)")
    ap.add_argument("--tweetqa", help="TweetQA train.json (the official train split)")
    ap.add_argument("--exclude", help="JSON {source file name: [doc ids]} of documents to leave out")
    ap.add_argument("--provenance", help="JSON {source file name: {repo, commit, paths, ...}} merged into SOURCES.json")
    a = ap.parse_args(argv)

    exclude = {}
    if a.exclude and os.path.exists(a.exclude):
        with open(a.exclude, encoding="utf-8") as f:
            exclude = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    prov = {}
    if a.provenance:
        with open(a.provenance, encoding="utf-8") as f:
            prov = json.load(f)

    jobs = []
    conv_stats = collections.defaultdict(collections.Counter)   # what a converter left out, and why
    if a.squad:
        with open(a.squad, "rb") as f:
            md5 = hashlib.md5(f.read()).hexdigest()
        if md5 != PROVENANCE["squad2_train"]["md5"]:
            print(f"warning: {a.squad} has md5 {md5}, the official train-v2.0.json has "
                  f"{PROVENANCE['squad2_train']['md5']}", file=sys.stderr)
        jobs.append(("squad2_train", lambda: squad_style(a.squad, "squad2_train", "en", "squad2-train")))
    if a.squad_v1:
        jobs.append(("squad1_train", lambda: squad_style(a.squad_v1, "squad1_train", "en", "squad1-train")))
    if a.fairytaleqa:
        jobs.append(("fairytaleqa_trainval", lambda: fairytaleqa(a.fairytaleqa)))
    if a.cmrc:
        jobs.append(("cmrc2018_train", lambda: squad_style(a.cmrc, "cmrc2018_train", "zh", "cmrc2018-train")))
    if a.qmsum:
        jobs.append(("qmsum_train", lambda: qmsum(a.qmsum)))
    if a.squality:
        jobs.append(("squality_train", lambda: squality(
            os.path.join(a.squality, "data", "v1-3", "txt", "train.jsonl"))))
    if a.subjqa:
        doms = tuple(d.strip() for d in a.subjqa_domains.split(",") if d.strip())
        jobs.append(("subjqa_train", lambda: subjqa(a.subjqa, doms, conv_stats["subjqa_train"])))
    if a.c3:
        jobs.append(("c3_train", lambda: c3(a.c3, conv_stats["c3_train"])))
    if a.tweetqa:
        jobs.append(("tweetqa_train", lambda: tweetqa(a.tweetqa, conv_stats["tweetqa_train"])))
    if not jobs:
        ap.error("name at least one source")

    sources_path = os.path.join(a.out, "SOURCES.json")
    sources = {}
    if os.path.exists(sources_path):
        with open(sources_path, encoding="utf-8") as f:
            sources = json.load(f)
    for name, gen in jobs:
        st = write(a.out, name, gen(), set(exclude.get(name, [])))
        entry = dict(PROVENANCE.get(name, {}))
        entry.update(prov.get(name, {}))
        entry["status"] = "built"
        for k in ("file", "bytes", "chars", "documents", "questions", "dropped_documents", "dropped_questions",
                  "dropped_ids"):
            entry[k] = st[k]
        if conv_stats.get(name):
            entry["conversion"] = dict(sorted(conv_stats[name].items()))
        entry["dropped_reason"] = ("overlap with docqa's development data (overlap.py filter; see "
                                   "training/data/excluded.json)") if st["dropped_ids"] else ""
        sources[name] = entry
        print(f"{name}: {st['documents']} documents, questions {st['questions']}, "
              f"dropped {st['dropped_documents']} documents ({st['dropped_questions']} questions), "
              f"{st['bytes'] / 1e6:.1f} MB" + (f"; conversion {dict(conv_stats[name])}" if conv_stats.get(name) else ""))
    for name, p in PROVENANCE.items():
        if name not in sources or sources[name].get("status") != "built":
            entry = dict(p)
            entry["status"] = "not built: source file not given to normalise.py"
            sources[name] = entry
    with open(sources_path, "w", encoding="utf-8") as f:
        json.dump(dict(sorted(sources.items())), f, ensure_ascii=False, indent=2)
        f.write("\n")

if __name__ == "__main__":
    main()
