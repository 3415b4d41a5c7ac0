#!/usr/bin/env python3
"""Overlap check between docqa's reader training data and its development/evaluation data.

Python 3.11 standard library only. Three commands:

  fingerprint  --normalised DIR --out training/data/fingerprints.bin
      Reads every <source>.jsonl.gz (or .jsonl) training file in DIR and writes a compact
      fingerprint file. The file is committed, so `check` runs without the training data.

  check        --fingerprints training/data/fingerprints.bin --shared ../shared/data
      Fingerprints every document and question of shared/data/qa/*.jsonl and every text of
      shared/data/retrieval/**/*.jsonl the same way, looks them up, prints a table per shared
      file and exits 1 when a shared document or question is judged leaked (rules below).

  filter       --normalised DIR --shared ../shared/data --out training/data/excluded.json
      The same comparison from the training side: lists the training documents that make a
      shared document fail (the training documents that contribute to an offending run of
      shingles, or that hold the whole shared document or one of its question+answer pairs),
      so that `normalise.py --exclude` can leave them out.

Fingerprints
  Text is normalised: Unicode NFKC, lower case, every run of white space -> one space,
  stripped. Every 64-character shingle of the normalised text (characters, so Chinese and
  English alike) is hashed with blake2b(digest_size=8) of its UTF-8 bytes, read as a
  little-endian uint64, and only hashes with value % 32 == 0 are kept. The choice depends on
  the shingle's content alone, so a passage copied from one side to the other keeps the same
  sampled shingles on both sides (on average one per 32 characters of copied text).
  Also hashed: each whole normalised document, each normalised title, each normalised
  question, and each (question, answer) pair ("q\\x1fa" for every reference answer, "q\\x1f"
  for an unanswerable question). Sampled shingles that occur in two or more training
  documents are listed again in a section "common": text repeated across training documents
  (a publisher's note, a committee chair's opening script) is boilerplate of its source.

File format (little endian)
  magic b"DQOVLP1\\0", u32 shingle length, u32 sampling modulus, u32 number of sections,
  u32 reserved; per section an 8-byte NUL-padded name and a u64 count; then each section's
  values as a sorted array of unique uint64.

Leak rules of `check`: a shared document fails when any holds
  R1 its whole normalised text is a training document's;
  R2 a run of >= RUN_SPECIFIC (5) sampled shingles found in training and in no more than one
     training document ("specific"), consecutive ones at most RUN_GAP (256) characters apart:
     expected of ~190+ characters copied from one training document;
  R3 a run of >= RUN_ANY (12) sampled shingles found in training, common or not (a passage
     repeated in several training documents);
  R4 more than MAX_FRACTION (10%) of its sampled shingles, and at least 4, are found in
     training (short documents copied for the most part);
  R5 one of its (question, answer) pairs is in training, for a question of at least
     MIN_QUESTION_CHARS (25) normalised characters (short generic pairs recur by chance).
  Title hits and question-text hits are reported, not failed: generic questions ("What is
  the plot of the story?", "Summarize the whole meeting.") and titles recur by design.
  Calibration (see DATA_CARD.md): between different meetings/stories of the same corpus, the
  boilerplate seen (Project Gutenberg transcriber's notes, AMI role-name/laughter turns)
  gives runs of at most 6 shingles in all and at most 3 specific ones.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import json
import os
import re
import struct
import sys
import unicodedata
from array import array
from concurrent.futures import ProcessPoolExecutor

SHINGLE = 64
MOD = 32
RUN_GAP = 256
RUN_SPECIFIC = 5
RUN_ANY = 12
MAX_FRACTION = 0.10
MIN_FRACTION_HITS = 4
MIN_QUESTION_CHARS = 25

MAGIC = b"DQOVLP1\0"
SECTIONS = ("shingle", "common", "doc", "title", "question", "qapair")

_WS = re.compile(r"\s+")


def norm(s: str) -> str:
    return _WS.sub(" ", unicodedata.normalize("NFKC", s or "").lower()).strip()


def h64(s: str) -> int:
    return int.from_bytes(hashlib.blake2b(s.encode("utf-8"), digest_size=8).digest(), "little")


def sampled(t: str) -> list:
    """[(char offset, hash)] of the sampled shingles of an already normalised text."""
    b2 = hashlib.blake2b
    n = len(t) - SHINGLE + 1
    if n <= 0:
        return []
    frm = int.from_bytes
    if t.isascii():
        mv = memoryview(t.encode("ascii"))
        ds = ((i, b2(mv[i:i + SHINGLE], digest_size=8).digest()) for i in range(n))
    else:
        ds = ((i, b2(t[i:i + SHINGLE].encode("utf-8"), digest_size=8).digest()) for i in range(n))
    return [(i, frm(d, "little")) for i, d in ds if d[0] & (MOD - 1) == 0]


def qa_keys(question: str, answers) -> list:
    q = norm(question)
    if not answers:
        return [q + "\x1f"]
    return [q + "\x1f" + norm(a) for a in answers if isinstance(a, str)]


def runs(positions):
    """Split sorted positions into runs whose consecutive members are <= RUN_GAP apart."""
    out, cur = [], []
    for p in positions:
        if cur and p - cur[-1] > RUN_GAP:
            out.append(cur)
            cur = []
        cur.append(p)
    if cur:
        out.append(cur)
    return out


# ----------------------------------------------------------------- reading data
def read_jsonl(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def training_files(folder):
    files = sorted(glob.glob(os.path.join(folder, "*.jsonl.gz")) + glob.glob(os.path.join(folder, "*.jsonl")))
    if not files:
        raise SystemExit(f"no *.jsonl(.gz) in {folder}")
    return files


def shared_units(shared):
    """[(file label, unit)] for every shared document and query; unit = dict(id, title, text, questions).
    Retrieval queries become text-less units with one question whose answers are None."""
    out = []
    qa = sorted(glob.glob(os.path.join(shared, "qa", "*.jsonl")))
    if not qa:
        raise SystemExit(f"no qa/*.jsonl under {shared}")
    for path in qa:
        label = os.path.relpath(path, shared)
        for d in read_jsonl(path):
            out.append((label, {"id": str(d.get("id", "")), "title": d.get("title", ""),
                                "text": d.get("text", ""), "questions": d.get("questions", [])}))
    for path in sorted(glob.glob(os.path.join(shared, "retrieval", "**", "*.jsonl"), recursive=True)):
        label = os.path.relpath(path, shared)
        is_query = os.path.basename(path).startswith("queries")
        for d in read_jsonl(path):
            did = str(d.get("id", d.get("_id", "")))
            if is_query:
                out.append((label, {"id": did, "title": "", "text": "",
                                    "questions": [{"question": d.get("text", ""), "answers": None}]}))
            else:
                out.append((label, {"id": did, "title": d.get("title", ""), "text": d.get("text", ""),
                                    "questions": []}))
    return out


def _fp_text(text):
    t = norm(text)
    return (h64(t) if t else None), sampled(t)


def fingerprint_texts(texts, workers=None):
    """[(doc hash or None, [(pos, shingle hash)])] for texts, in parallel over the machine's cores."""
    workers = workers or os.cpu_count() or 1
    if workers == 1 or len(texts) < 4:
        return [_fp_text(t) for t in texts]
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # long texts first, spread out
    out = [None] * len(texts)
    with ProcessPoolExecutor(max_workers=workers) as ex:
        for i, r in zip(order, ex.map(_fp_text, [texts[i] for i in order], chunksize=4)):
            out[i] = r
    return out


# ----------------------------------------------------------------- fingerprint file
def write_fp(path, sections):
    arrays = []
    for name in SECTIONS:
        a = array("Q", sorted(sections[name]))
        if sys.byteorder != "little":
            a.byteswap()
        arrays.append((name, a))
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<IIII", SHINGLE, MOD, len(arrays), 0))
        for name, a in arrays:
            f.write(name.encode().ljust(8, b"\0") + struct.pack("<Q", len(a)))
        for _, a in arrays:
            f.write(a.tobytes())


def read_fp(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != MAGIC:
        raise SystemExit(f"{path}: not a fingerprint file")
    shingle, mod, n, _ = struct.unpack_from("<IIII", data, 8)
    if (shingle, mod) != (SHINGLE, MOD):
        raise SystemExit(f"{path}: made with shingle {shingle} / mod {mod}, this script uses {SHINGLE} / {MOD}")
    off = 24
    heads = []
    for _ in range(n):
        name = data[off:off + 8].rstrip(b"\0").decode()
        (count,) = struct.unpack_from("<Q", data, off + 8)
        heads.append((name, count))
        off += 16
    out = {}
    for name, count in heads:
        a = array("Q")
        a.frombytes(data[off:off + 8 * count])
        if sys.byteorder != "little":
            a.byteswap()
        out[name] = set(a)
        off += 8 * count
    missing = set(SECTIONS) - set(out)
    if missing:
        raise SystemExit(f"{path}: sections missing: {sorted(missing)}")
    return out


def cmd_fingerprint(a):
    docs = [d for path in training_files(a.normalised) for d in read_jsonl(path)]
    fps = fingerprint_texts([d.get("text", "") for d in docs])
    sec = {k: set() for k in SECTIONS}
    seen_once = set()
    nq = 0
    for d, (dh, sh) in zip(docs, fps):
        hs = {h for _, h in sh}
        sec["common"] |= hs & seen_once
        seen_once |= hs
        if dh is not None:
            sec["doc"].add(dh)
        if norm(d.get("title", "")):
            sec["title"].add(h64(norm(d["title"])))
        for q in d.get("questions", []):
            qt = norm(q.get("question", ""))
            if not qt:
                continue
            nq += 1
            sec["question"].add(h64(qt))
            for k in qa_keys(q["question"], q.get("answers") or []):
                sec["qapair"].add(h64(k))
    sec["shingle"] = seen_once
    write_fp(a.out, sec)
    print(f"{len(docs)} documents, {nq} questions -> {a.out} ({os.path.getsize(a.out) / 1e6:.2f} MB): "
          + ", ".join(f"{k} {len(v)}" for k, v in sec.items()))
    return 0


# ----------------------------------------------------------------- judging one shared document
def judge(unit, dh, sh, fp):
    """Overlap figures and leak reasons of one shared unit; sh = its [(pos, hash)]."""
    seen, pos_any, pos_spec = set(), [], []
    for p, h in sh:
        if h in seen:
            continue
        seen.add(h)
        if h in fp["shingle"]:
            pos_any.append(p)
            if h not in fp["common"]:
                pos_spec.append(p)
    run_any = max((len(r) for r in runs(pos_any)), default=0)
    run_spec = max((len(r) for r in runs(pos_spec)), default=0)
    nsamp = len(seen)
    r = {
        "samples": nsamp, "hits": len(pos_any), "specific": len(pos_spec),
        "fraction": len(pos_any) / nsamp if nsamp else 0.0,
        "run_any": run_any, "run_spec": run_spec,
        "doc_hit": dh is not None and dh in fp["doc"],
        "title_hit": bool(norm(unit.get("title", ""))) and h64(norm(unit["title"])) in fp["title"],
        "q_hits": 0, "qa_hits": [],
    }
    for q in unit.get("questions", []):
        qt = norm(q.get("question", ""))
        if not qt:
            continue
        if h64(qt) in fp["question"]:
            r["q_hits"] += 1
        if q.get("answers") is None:  # retrieval query: nothing to pair it with
            continue
        if any(h64(k) in fp["qapair"] for k in qa_keys(q["question"], q.get("answers") or [])):
            r["qa_hits"].append((str(q.get("id", "")), qt))
    r["qa_long"] = [x for x in r["qa_hits"] if len(x[1]) >= MIN_QUESTION_CHARS]
    why = []
    if r["doc_hit"]:
        why.append("R1 whole document")
    if run_spec >= RUN_SPECIFIC:
        why.append(f"R2 run of {run_spec} specific shingles")
    if run_any >= RUN_ANY:
        why.append(f"R3 run of {run_any} shingles")
    if r["hits"] >= MIN_FRACTION_HITS and r["fraction"] > MAX_FRACTION:
        why.append(f"R4 {r['fraction']:.1%} of shingles")
    if r["qa_long"]:
        why.append(f"R5 {len(r['qa_long'])} question+answer pair(s)")
    r["why"] = why
    return r


def cmd_check(a):
    fp = read_fp(a.fingerprints)
    units = shared_units(a.shared)
    fps = fingerprint_texts([u["text"] for _, u in units])
    rows, leaks = {}, []
    for (label, unit), (dh, sh) in zip(units, fps):
        r = judge(unit, dh, sh, fp)
        s = rows.setdefault(label, dict(docs=0, qs=0, overlap=0, max_run=0, max_spec=0, max_frac=0.0,
                                        doc=0, title=0, q=0, qa=0, qa_long=0, leaked=0))
        s["docs"] += bool(unit["text"])
        s["qs"] += len(unit["questions"])
        s["overlap"] += r["hits"] > 0
        s["max_run"] = max(s["max_run"], r["run_any"])
        s["max_spec"] = max(s["max_spec"], r["run_spec"])
        s["max_frac"] = max(s["max_frac"], r["fraction"])
        s["doc"] += r["doc_hit"]
        s["title"] += r["title_hit"]
        s["q"] += r["q_hits"]
        s["qa"] += len(r["qa_hits"])
        s["qa_long"] += len(r["qa_long"])
        if r["why"]:
            s["leaked"] += 1
            leaks.append((label, unit["id"], r["why"]))
        if a.verbose and (r["hits"] or r["qa_hits"]):
            print(f"  {label} {unit['id']}: {r['hits']}/{r['samples']} sampled shingles in training "
                  f"({r['specific']} specific), longest run {r['run_any']} ({r['run_spec']} specific)"
                  + (f", q+a {r['qa_hits'][:3]}" if r["qa_hits"] else ""), file=sys.stderr)

    hdr = ("shared file", "docs", "questions", "docs w/ overlap", "longest run (specific)", "max frac",
           "doc hits", "title hits", "q-text hits", "q+a hits (long q)", "leaked")
    table = [hdr]
    for label, s in rows.items():
        table.append((label, str(s["docs"]), str(s["qs"]), str(s["overlap"]),
                      f"{s['max_run']} ({s['max_spec']})", f"{s['max_frac']:.2%}", str(s["doc"]),
                      str(s["title"]), str(s["q"]), f"{s['qa']} ({s['qa_long']})", str(s["leaked"])))
    w = [max(len(r[i]) for r in table) for i in range(len(hdr))]
    for i, r in enumerate(table):
        print("  ".join(c.ljust(w[j]) if j == 0 else c.rjust(w[j]) for j, c in enumerate(r)))
        if i == 0:
            print("  ".join("-" * x for x in w))
    print(f"{len(fp['shingle'])} training shingles ({SHINGLE} chars, 1/{MOD} sampled), {len(fp['doc'])} documents, "
          f"{len(fp['question'])} questions. Fail rules: whole document; a run of >= {RUN_SPECIFIC} specific or "
          f">= {RUN_ANY} shingles (gaps <= {RUN_GAP} chars); > {MAX_FRACTION:.0%} of a document's shingles "
          f"(>= {MIN_FRACTION_HITS}); a question+answer pair (question >= {MIN_QUESTION_CHARS} chars).")
    if leaks:
        for label, did, why in leaks[:50]:
            print(f"LEAK {label} {did}: {'; '.join(why)}")
        print(f"FAIL: {len(leaks)} shared documents overlap the training data")
        return 1
    print("PASS: no shared document or question overlaps the training data beyond the thresholds")
    return 0


# ----------------------------------------------------------------- filter (training side)
def cmd_filter(a):
    docs = []
    for path in training_files(a.normalised):
        name = os.path.basename(path).split(".jsonl")[0]
        docs.extend((name, d) for d in read_jsonl(path))
    units = shared_units(a.shared)
    tfps = fingerprint_texts([d.get("text", "") for _, d in docs])
    sfps = fingerprint_texts([u["text"] for _, u in units])

    owners = {}                       # shingle hash -> [training doc index]
    doc_index = {}
    qa_index = {}
    for i, ((name, d), (dh, sh)) in enumerate(zip(docs, tfps)):
        for h in {h for _, h in sh}:
            owners.setdefault(h, []).append(i)
        if dh is not None:
            doc_index.setdefault(dh, []).append(i)
        for q in d.get("questions", []):
            for k in qa_keys(q.get("question", ""), q.get("answers") or []):
                qa_index.setdefault(h64(k), []).append(i)
    fp = {"shingle": set(owners), "common": {h for h, o in owners.items() if len(o) > 1},
          "doc": set(doc_index), "title": set(), "question": set(), "qapair": set(qa_index)}

    drop = {}                         # training doc index -> reasons
    for (label, unit), (dh, sh) in zip(units, sfps):
        r = judge(unit, dh, sh, fp)
        if not r["why"]:
            continue
        where = f"{label} {unit['id']}"
        if r["doc_hit"]:
            for i in doc_index[dh]:
                drop.setdefault(i, []).append(f"whole document = {where}")
        for q in unit.get("questions", []):
            if q.get("answers") is None or len(norm(q.get("question", ""))) < MIN_QUESTION_CHARS:
                continue
            for k in qa_keys(q["question"], q.get("answers") or []):
                for i in qa_index.get(h64(k), []):
                    drop.setdefault(i, []).append(f"question+answer of {where}")
        # shingle rules: every training document with >= 2 shingles in an offending run
        seen, hits = set(), []
        for p, h in sh:
            if h in fp["shingle"] and h not in seen:
                seen.add(h)
                hits.append((p, h))
        pos_to_h = dict(hits)
        shingle_rule = any(w.startswith(("R2", "R3", "R4")) for w in r["why"])
        if shingle_rule:
            offending = [run for run in runs([p for p, _ in hits])
                         if len(run) >= RUN_SPECIFIC or r["fraction"] > MAX_FRACTION]
            for run in offending:
                count = {}
                for p in run:
                    for i in owners[pos_to_h[p]]:
                        count[i] = count.get(i, 0) + 1
                for i, c in count.items():
                    if c >= 2:
                        drop.setdefault(i, []).append(f"{c} shingles in a run of {len(run)} with {where}")
    excluded = {"_comment": "training documents left out because they share text or a question+answer "
                            "with docqa's development/evaluation data (written by overlap.py filter)"}
    reasons = {}
    for i in sorted(drop):
        name, d = docs[i]
        excluded.setdefault(name, []).append(d["id"])
        reasons[d["id"]] = sorted(set(drop[i]))
        print(f"  drop {name} {d['id']}: {'; '.join(reasons[d['id']][:3])}", file=sys.stderr)
    excluded["_reasons"] = reasons
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(excluded, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(drop)} training documents to exclude -> {a.out}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("fingerprint", help="fingerprint the normalised training data")
    p.add_argument("--normalised", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("check", help="check shared data against the fingerprints")
    p.add_argument("--fingerprints", required=True)
    p.add_argument("--shared", required=True)
    p.add_argument("-v", "--verbose", action="store_true")
    p = sub.add_parser("filter", help="list training documents that overlap shared data")
    p.add_argument("--normalised", required=True)
    p.add_argument("--shared", required=True)
    p.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    return {"fingerprint": cmd_fingerprint, "check": cmd_check, "filter": cmd_filter}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
