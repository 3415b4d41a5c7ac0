#!/usr/bin/env python3
"""Chaos: `kill -9` a real `docqa serve` while it ingests and answers, restart it on the same data, and count
what survived.

A fresh server (SQLite, the CPU default, local mode, rate limit off) runs on a temporary data directory on a
loopback port. Each of --rounds rounds starts the server (the same data directory every time), uploads one
to three documents (text, Markdown and HTML from the test fixtures and the evaluation data, PDF and DOCX
built from them here, and long meeting transcripts whose ingestion takes several seconds), asks questions
about the documents already ready (streamed or not, some streams closed after their first token, some
questions about every document), sometimes deletes a document while a question about it is being answered
or cancels an ingestion, and at a random moment kills the server with SIGKILL, after reading its peak
resident memory (VmHWM). After the last round the server is started once more and the queue is left to
drain. Then it prints:

- documents: acknowledged (the upload's 202 gave an id) = ready + failed with a reason + cancelled + deleted
  (by this script) + lost (unknown to the server, still processing after the drain, or failed without a
  reason), and documents stored whose upload was never acknowledged (the kill came first);
- answers: asked = refused (an error status before any answer was recorded) + not recorded (the kill came
  before the server stored the question) + started; started = settled (succeeded, stopped, or failed with a
  reason) + stuck (still running after the drain, or failed without a reason), and among them the answers
  about documents deleted, failed or cancelled;
- integrity: the chunks of ready documents as the database, the BM25 index and the dense index count them
  (`GET /v1/stats`) against the sum of the ready documents' `chunk_count` (`GET /v1/documents`); a
  search scoped to each ready document finds its chunks with ordinals below its chunk count; a search over
  everything finds no chunk of a document that is not ready; each document's job agrees with it;
- after the drain, three more questions to the restarted server (streamed, plain, and a stream closed after its
  first token), which must end succeeded, succeeded and stopped (they count among the answers above);
- server starts, kills, peak resident memory per process, the load average before and after.

The exit status is 1 when anything is lost or stuck or an integrity check fails.

    python3 bench/chaos.py --docqa target/release/docqa --rounds 20 --seed 1 --json chaos.json

Only the standard library: the server is reached over HTTP on loopback.
"""

import argparse
import http.client
import itertools
import json
import os
import queue
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path

from chaos_documents import MIME, ROOT, document_pool, hostile_pool, render

TERMINAL_JOB = ("succeeded", "failed", "cancelled")
JOB_OF_STATUS = {"ready": "succeeded", "failed": "failed", "cancelled": "cancelled"}
TAG = re.compile(r"\[chaos (r\d+[a-z]\d+)\]$")
# Errors a client sees when the server dies under it or is not listening.
CONNECTION_ERRORS = (urllib.error.URLError, http.client.HTTPException, OSError, EOFError, ValueError)


# ---------------------------------------------------------------------------------------------------------
# HTTP.


def call(base, method, path, body=None, timeout=120):
    """(status, parsed JSON or None). Connection errors propagate."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as res:
            raw = res.read()
            return res.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, {"message": raw[:200].decode(errors="replace")}


def upload(base, name, mime, payload):
    boundary = "docqa-chaos-boundary-7f3a"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
        f"Content-Type: {mime}\r\n\r\n"
    ).encode()
    body = head + payload + f"\r\n--{boundary}--\r\n".encode()
    req = urllib.request.Request(base + "/v1/documents?allow_duplicate=true", data=body, method="POST")
    req.add_header("Content-Type", f"multipart/form-data; boundary={boundary}")
    try:
        with urllib.request.urlopen(req, timeout=120) as res:
            return res.status, json.load(res)
    except urllib.error.HTTPError as e:
        return e.code, None


def ask_streamed(base, body, close_after_token):
    """Reads the event stream: ('answer', FinalAnswer) | ('error', body) | ('closed', None) when this client
    closed it after the first token | ('cut', None) when the stream ended without a verdict."""
    req = urllib.request.Request(base + "/v1/ask", data=json.dumps(body).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=300) as res:
        event, data = None, []
        for raw in res:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
            elif line == "" and data:
                payload = "\n".join(data)
                if event == "token" and close_after_token:
                    return "closed", None
                if event == "answer":
                    return "answer", json.loads(payload)
                if event == "error":
                    return "error", json.loads(payload)
                event, data = None, []
    return "cut", None


# ---------------------------------------------------------------------------------------------------------
# The server.


class Server:
    def __init__(self, docqa, data_dir, log_path, extra):
        self.docqa, self.data_dir, self.log_path, self.extra = docqa, data_dir, log_path, extra
        self.proc, self.base = None, None
        self.lives = []  # one entry per process: pid, start seconds, peak RSS, how it ended

    def start(self):
        args = [self.docqa, "serve", "--bind", "127.0.0.1:0", "--data-dir", str(self.data_dir)]
        args += ["--local-mode", "on", "--rate-limit-per-minute", "0"] + self.extra
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start {time.strftime('%H:%M:%S')} =====\n".encode())
            log.flush()
            began = time.monotonic()
            self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, text=True)
        found = queue.Queue()

        def read(out):
            for line in out:
                m = re.search(r"listening on (http://\S+)", line)
                if m:
                    found.put(m.group(1))

        threading.Thread(target=read, args=(self.proc.stdout,), daemon=True).start()
        while True:
            try:
                self.base = found.get(timeout=0.2)
                break
            except queue.Empty:
                if self.proc.poll() is not None or time.monotonic() - began > 300:
                    raise RuntimeError(f"docqa serve did not start (exit {self.proc.poll()}); see {self.log_path}")
        self.lives.append({"pid": self.proc.pid, "start_s": round(time.monotonic() - began, 2)})

    def peak_rss_kib(self):
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1])
        except OSError:
            return None
        return None

    def kill(self):
        self.lives[-1]["peak_rss_kib"] = self.peak_rss_kib()
        self.lives[-1]["ended"] = "SIGKILL"
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def stop(self):
        self.lives[-1]["peak_rss_kib"] = self.peak_rss_kib()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
            self.lives[-1]["ended"] = "SIGTERM"
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self.lives[-1]["ended"] = "SIGKILL after 60 s of SIGTERM"
        self.proc = None


# ---------------------------------------------------------------------------------------------------------
# The chaos.


class Chaos:
    def __init__(self, args, server, pool):
        self.args, self.server, self.pool = args, server, pool
        self.lock = threading.Lock()
        self.documents = {}  # acknowledged: document id -> record
        self.unacknowledged_uploads = 0
        self.asks = []  # every question sent
        self.events = Counter()
        self.uploads = itertools.count(1)

    def note(self, key):
        with self.lock:
            self.events[key] += 1

    # Operations, each run in its own thread against one server life.

    def op_upload(self, base, rnd, item, cancel_after):
        kind, record = item
        with self.lock:
            tag = f"r{rnd:02d}u{next(self.uploads)}"
        if kind == "hostile":
            payload, name, mime = record["payload"], f"{tag}-{record['name']}", record["mime"]
        else:
            title = f"{record['title']} ({tag})"
            payload = render(kind, title, record["text"])
            name, mime = f"{tag}-{re.sub(r'[^A-Za-z0-9]+', '-', record['id'])[:40]}.{kind}", MIME[kind]
        try:
            status, res = upload(base, name, mime, payload)
        except CONNECTION_ERRORS:
            with self.lock:
                self.unacknowledged_uploads += 1
            return
        if status != 202 or not res:
            self.note(f"upload refused {status}")
            return
        doc = {
            "id": res["document_id"],
            "job_id": res["job_id"],
            "kind": kind,
            "bytes": len(payload),
            "round": rnd,
            "record": record,
        }
        with self.lock:
            self.documents[doc["id"]] = doc
        if cancel_after is not None:
            time.sleep(cancel_after)
            doc["cancel_sent"] = True
            try:
                status, _ = call(base, "POST", f"/v1/jobs/{doc['job_id']}/cancel")
                self.note(f"cancel {status}")
            except CONNECTION_ERRORS:
                self.note("cancel cut off")

    def op_ask(self, base, ask):
        body = {"question": ask["question"], "route": ask["route"], "max_tokens": ask["max_tokens"]}
        if ask["documents"]:
            body["scope"] = {"document_ids": ask["documents"]}
        body["stream"] = ask["stream"]
        try:
            if ask["stream"]:
                outcome, res = ask_streamed(base, body, ask["close_after_token"])
                ask["client"] = outcome
                if outcome == "answer":
                    ask["answer_id"] = res["answer_id"]
                    ask["finish_reason"] = res["finish_reason"]
                elif outcome == "error":
                    ask["client_error"] = res.get("error_type")
            else:
                status, res = call(base, "POST", "/v1/ask", body, timeout=300)
                if status == 200:
                    ask["client"] = "answer"
                    ask["answer_id"] = res["answer_id"]
                    ask["finish_reason"] = res["finish_reason"]
                else:
                    ask["client"] = f"http {status}"
                    ask["client_error"] = (res or {}).get("error_type")
        except urllib.error.HTTPError as e:
            ask["client"] = f"http {e.code}"
            try:
                ask["client_error"] = json.loads(e.read()).get("error_type")
            except CONNECTION_ERRORS:
                pass
        except CONNECTION_ERRORS as e:
            ask["client"] = "connection lost"
            ask["client_error"] = type(e).__name__

    def op_delete(self, base, doc_id, after):
        time.sleep(after)
        self.documents[doc_id]["delete_sent"] = True
        try:
            status, _ = call(base, "DELETE", f"/v1/documents/{doc_id}")
            self.documents[doc_id]["delete_status"] = status
        except CONNECTION_ERRORS:
            self.documents[doc_id]["delete_status"] = "cut off"

    def ready_documents(self, base):
        """Our documents the server says are ready (and we did not try to delete)."""
        status, res = call(base, "GET", "/v1/documents?status=ready&limit=500")
        if status != 200:
            return []
        mine = []
        for d in res["documents"]:
            doc = self.documents.get(d["id"])
            if doc and not doc.get("delete_sent"):
                mine.append((doc, d.get("token_count") or 0))
        return mine

    def plan_ask(self, rng, rnd, n, ready, about=None):
        if about is None and (not ready or rng.random() < 0.15):
            documents, questions, tokens = [], ["What is this about?", "Who is mentioned most?"], 10**9
        else:
            doc, tokens = about or rng.choice(ready)
            documents = [doc["id"]]
            questions = [q["question"] for q in doc["record"]["questions"]] or ["What is this document about?"]
        route = rng.choice(["rag", "rag", "auto", "long"] if tokens < 6000 else ["rag", "rag", "auto"])
        stream = rng.random() < 0.6
        ask = {
            "tag": f"r{rnd:02d}a{n}",
            "round": rnd,
            "documents": documents,
            "route": route,
            "stream": stream,
            "close_after_token": stream and rng.random() < 0.2,
            "max_tokens": rng.choice([16, 32, 48]),
            "client": "not sent",
        }
        ask["question"] = f"{rng.choice(questions)} [chaos {ask['tag']}]"
        return ask

    def round(self, rng, rnd):
        server = self.server
        server.start()
        base = server.base
        ready = self.ready_documents(base)
        kill_after = rng.uniform(self.args.min_kill_s, self.args.max_kill_s)
        ops = []  # (start offset in seconds, function, arguments)
        for _ in range(rng.randint(1, 3)):
            classes, weights = ["small", "pdf", "docx", "large", "hostile"], [45, 20, 15, 20, self.args.hostile_weight]
            cls = rng.choices(classes, weights=weights)[0]
            ops.append((rng.uniform(0, 0.8 * kill_after), self.op_upload, (rnd, rng.choice(self.pool[cls]), None)))
        if rng.random() < self.args.cancel_probability:
            item = rng.choice(self.pool["large"] + self.pool["docx"])
            ops.append((rng.uniform(0, 0.5 * kill_after), self.op_upload, (rnd, item, rng.uniform(0, 2.5))))
        n = 0
        for _ in range(rng.randint(1, 3) if ready else 0):
            n += 1
            ask = self.plan_ask(rng, rnd, n, ready)
            self.asks.append(ask)
            ops.append((rng.uniform(0, 0.9 * kill_after), self.op_ask, (ask,)))
        if ready and rng.random() < self.args.delete_probability:
            victim = rng.choice(ready)
            n += 1
            ask = self.plan_ask(rng, rnd, n, ready, about=victim)
            ask["stream"], ask["close_after_token"], ask["deleted_during"] = True, False, True
            self.asks.append(ask)
            at = rng.uniform(0, 0.5 * kill_after)
            ops.append((at, self.op_ask, (ask,)))
            ops.append((at + rng.uniform(0.3, 2.0), self.op_delete, (victim[0]["id"], 0)))
        threads = []
        t0 = time.monotonic()
        for at, fn, fargs in sorted(ops, key=lambda o: o[0]):
            threads.append(threading.Thread(target=delayed, args=(t0 + at, fn, (base, *fargs)), daemon=True))
            threads[-1].start()
        time.sleep(max(0.0, t0 + kill_after - time.monotonic()))
        server.lives[-1]["round"] = rnd
        server.lives[-1]["killed_after_s"] = round(kill_after, 2)
        server.kill()
        for t in threads:
            t.join(timeout=60)
        print(
            f"round {rnd:2d}: killed after {kill_after:4.1f} s; {len(ops)} operations; "
            f"{len(self.documents)} documents acknowledged so far; peak RSS "
            f"{(server.lives[-1]['peak_rss_kib'] or 0) / 1024:.0f} MiB",
            flush=True,
        )

    def after_the_chaos(self, rng, rnd):
        """Once the queue has drained, the restarted server must still answer: a streamed answer, a plain
        one and a stream closed after its first token (which must end `stopped`), about ready documents."""
        ready = self.ready_documents(self.server.base)
        if not ready:
            return
        for n, (stream, close) in enumerate([(True, False), (False, False), (True, True)], start=1):
            ask = self.plan_ask(rng, rnd, n, ready, about=rng.choice(ready))
            ask.update(route="rag", stream=stream, close_after_token=close, after_the_chaos=True)
            self.asks.append(ask)
            self.op_ask(self.server.base, ask)
        self.drain(self.server.base)

    def drain(self, base):
        """Waits until no document is processing and no answer is running; seconds taken."""
        began = time.monotonic()
        while time.monotonic() - began < self.args.drain_timeout_s:
            _, res = call(base, "GET", "/v1/documents?status=processing&limit=1")
            _, answers = call(base, "GET", "/v1/answers?limit=200")
            running = [a for a in answers["answers"] if a["status"] == "running"]
            if res["total"] == 0 and not running:
                break
            time.sleep(2)
        return round(time.monotonic() - began, 1)


def delayed(when, fn, fargs):
    time.sleep(max(0.0, when - time.monotonic()))
    fn(*fargs)


# ---------------------------------------------------------------------------------------------------------
# After the drain: what became of everything.


def all_documents(base):
    docs, offset = [], 0
    while True:
        _, res = call(base, "GET", f"/v1/documents?limit=500&offset={offset}")
        docs += res["documents"]
        offset += len(res["documents"])
        if offset >= res["total"] or not res["documents"]:
            return docs


def account_documents(chaos, base):
    out = Counter()
    failures, problems = Counter(), []
    for doc in chaos.documents.values():
        status, d = call(base, "GET", f"/v1/documents/{doc['id']}")
        if status == 404:
            if doc.get("delete_sent"):
                doc["final"] = "deleted"
            else:
                doc["final"] = "lost"
                problems.append(f"document {doc['id']} ({doc['kind']}, round {doc['round']}) is unknown")
        elif d["status"] == "ready":
            doc["final"] = "ready"
            doc["chunk_count"] = d["chunk_count"]
        elif d["status"] == "failed" and d.get("error"):
            doc["final"] = "failed"
            failures[d["error"]] += 1
        elif d["status"] == "cancelled":
            doc["final"] = "cancelled"
        else:
            doc["final"] = "lost"
            problems.append(f"document {doc['id']} ({doc['kind']}, round {doc['round']}) is {d['status']}: {d}")
        if status == 200:
            j_status, job = call(base, "GET", f"/v1/jobs/{doc['job_id']}")
            expected = JOB_OF_STATUS.get(d["status"])
            if j_status != 200 or job["status"] != expected:
                got = job["status"] if j_status == 200 else j_status
                problems.append(f"document {doc['id']} is {d['status']} but its job {doc['job_id']} is {got}")
        out[doc["final"]] += 1
    return out, failures, problems


def account_answers(chaos, base):
    rows = {}
    _, res = call(base, "GET", "/v1/answers?limit=200")
    for a in res["answers"]:
        rows[a["answer_id"]] = a
    for doc in chaos.documents.values():
        if doc.get("final") not in (None, "deleted", "lost"):
            _, res = call(base, "GET", f"/v1/documents/{doc['id']}/answers?limit=200")
            for a in res["answers"]:
                rows[a["answer_id"]] = a
    for ask in chaos.asks:
        if ask.get("answer_id") and ask["answer_id"] not in rows:
            status, a = call(base, "GET", f"/v1/answers/{ask['answer_id']}")
            if status == 200:
                rows[a["answer_id"]] = a
    by_tag = {}
    for a in rows.values():
        m = TAG.search(a["question"])
        if m:
            by_tag[m.group(1)] = a
    out, finals, errors, problems = Counter(), Counter(), Counter(), []
    unready = {d["id"] for d in chaos.documents.values() if d.get("final") in ("deleted", "failed", "cancelled")}
    about_unready = Counter()
    for ask in chaos.asks:
        row = by_tag.get(ask["tag"])
        ask["server_status"] = row["status"] if row else None
        if row is None:
            if ask["client"] in ("answer", "closed"):
                out["lost"] += 1
                problems.append(f"answer {ask['tag']} ({ask.get('answer_id')}) was given but is not stored")
            elif ask["client"].startswith("http") or ask["client"] == "error":
                out["refused"] += 1
                errors[f"refused: {ask['client']} {ask.get('client_error')}"] += 1
            else:
                out["not recorded"] += 1
            continue
        out["started"] += 1
        finals[row["status"]] += 1
        if row["status"] == "running" or (row["status"] == "failed" and not row.get("error")):
            out["stuck"] += 1
            problems.append(f"answer {row['answer_id']} ({ask['tag']}) is {row['status']} after the drain: {row}")
        else:
            out["settled"] += 1
        if row["status"] == "failed" and row.get("error"):
            errors[row["error"][:90]] += 1
        if ask.get("after_the_chaos") and row["status"] not in ("succeeded", "stopped"):
            problems.append(f"answer {ask['tag']} after the drain ended {row['status']}: {row.get('error')}")
        if unready & set(ask["documents"]):
            about_unready[row["status"]] += 1
    return out, finals, errors, about_unready, problems


def integrity(chaos, base):
    problems = []
    docs = all_documents(base)
    ready = {d["id"]: d for d in docs if d["status"] == "ready"}
    ours = set(chaos.documents)
    extra = Counter(d["status"] for d in docs if d["id"] not in ours)
    for d in docs:
        if d["status"] == "processing":
            problems.append(f"document {d['id']} ({d['file_name']}) still processing after the drain")
        if d["status"] == "ready" and not d.get("chunk_count"):
            problems.append(f"ready document {d['id']} ({d['file_name']}) has no chunks")
    _, stats = call(base, "GET", "/v1/stats")
    listed = sum(d.get("chunk_count") or 0 for d in ready.values())
    counts = [stats["database_chunks"], stats["bm25_chunks"], stats["dense_chunks"], listed]
    if len(set(counts)) != 1:
        problems.append(
            f"chunk counts disagree: database {counts[0]}, BM25 {counts[1]}, dense {counts[2]}, "
            f"sum of ready documents' chunk_count {counts[3]}"
        )
    scoped_ok = 0
    for d in ready.values():
        doc = chaos.documents.get(d["id"])
        query = doc["record"]["title"] if doc else d.get("title") or d["file_name"]
        body = {"query": query, "scope": {"document_ids": [d["id"]]}, "k": 100, "mode": "bm25"}
        status, res = call(base, "POST", "/v1/search", body)
        hits = res.get("hits", []) if status == 200 else []
        bad = [h for h in hits if h["document_id"] != d["id"] or not 0 <= h["ordinal"] < d["chunk_count"]]
        if status != 200 or not hits or bad:
            problems.append(
                f"search scoped to {d['id']} ({d['chunk_count']} chunks): {status}, {len(hits)} hits, {bad[:2]}"
            )
        else:
            scoped_ok += 1
    stray = 0
    for query in ("the", "meeting", "said", "的", "king", "data"):
        for mode in ("bm25", "dense"):
            status, res = call(base, "POST", "/v1/search", {"query": query, "k": 100, "mode": mode})
            stray += sum(1 for h in res.get("hits", []) if h["document_id"] not in ready)
    if stray:
        problems.append(f"{stray} search hits on documents that are not ready")
    figures = {
        "database_chunks": counts[0],
        "bm25_chunks": counts[1],
        "dense_chunks": counts[2],
        "ready_chunk_count_sum": counts[3],
        "scoped_searches_ok": scoped_ok,
        "ready_documents": len(ready),
        "stray_hits": stray,
        "unacknowledged_stored": dict(extra),
    }
    return figures, problems


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docqa", default="target/release/docqa")
    p.add_argument("--data", default=os.environ.get("DOCQA_DATA", str(ROOT.parent / "shared" / "data")))
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--min-kill-s", type=float, default=2.0, help="earliest kill, seconds after the server is up")
    p.add_argument("--max-kill-s", type=float, default=20.0, help="latest kill")
    p.add_argument("--large-chars", type=int, default=90000, help="characters kept of each long transcript")
    p.add_argument("--delete-probability", type=float, default=0.25, help="per round: delete while answering")
    p.add_argument("--cancel-probability", type=float, default=0.25, help="per round: cancel an ingestion")
    p.add_argument("--hostile-weight", type=float, default=15, help="weight of malformed and hostile uploads")
    p.add_argument("--drain-timeout-s", type=float, default=1200)
    p.add_argument("--serve-args", default="", help="extra docqa serve flags")
    p.add_argument("--keep", action="store_true", help="keep the data directory and server log")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()

    load_before = [round(x, 2) for x in os.getloadavg()]
    rng = random.Random(args.seed)
    pool = document_pool(Path(args.data), args.large_chars)
    pool["hostile"] = hostile_pool(random.Random(args.seed))
    work = Path(tempfile.mkdtemp(prefix="docqa-chaos-"))
    server = Server(args.docqa, work / "data", work / "server.log", shlex.split(args.serve_args))
    chaos = Chaos(args, server, pool)
    print(f"chaos: {args.rounds} rounds, seed {args.seed}, data directory {work / 'data'}", flush=True)
    began = time.monotonic()
    for rnd in range(1, args.rounds + 1):
        chaos.round(rng, rnd)
    server.start()
    drain_s = chaos.drain(server.base)
    chaos.after_the_chaos(rng, args.rounds + 1)
    docs, failures, doc_problems = account_documents(chaos, server.base)
    answers, finals, errors, about_unready, answer_problems = account_answers(chaos, server.base)
    checks, integrity_problems = integrity(chaos, server.base)
    server.stop()
    total_s = round(time.monotonic() - began, 1)
    load_after = [round(x, 2) for x in os.getloadavg()]

    peaks = [life["peak_rss_kib"] / 1024 for life in server.lives if life.get("peak_rss_kib")]
    kinds = Counter(
        d["kind"] + (" (large)" if d["bytes"] > 40000 and d["kind"] == "txt" else "") for d in chaos.documents.values()
    )
    figures = {
        "rounds": args.rounds,
        "seed": args.seed,
        "seconds": total_s,
        "drain_seconds": drain_s,
        "server_starts": len(server.lives),
        "restarts": len(server.lives) - 1,
        "kills": sum(1 for life in server.lives if life.get("ended") == "SIGKILL"),
        "documents": {"acknowledged": len(chaos.documents), **docs, "by_kind": dict(kinds)},
        "document_failures": dict(failures),
        "unacknowledged_uploads": chaos.unacknowledged_uploads,
        "answers": {"asked": len(chaos.asks), **answers, "final_status": dict(finals)},
        "answer_errors": dict(errors),
        "answers_about_deleted_failed_cancelled": dict(about_unready),
        "integrity": checks,
        "peak_rss_mib": {
            "max": round(max(peaks), 1) if peaks else None,
            "median": round(statistics.median(peaks), 1) if peaks else None,
            "processes": len(peaks),
        },
        "server_lives": server.lives,
        "client_events": dict(chaos.events),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "problems": doc_problems + answer_problems + integrity_problems,
        "document_details": [
            {k: v for k, v in d.items() if k != "record"} | {"source": d["record"]["id"]}
            for d in chaos.documents.values()
        ],
        "asks": chaos.asks,
    }
    lost, stuck = docs.get("lost", 0) + answers.get("lost", 0), answers.get("stuck", 0)

    print()
    print(f"rounds {args.rounds}, seed {args.seed}: {total_s} s in all, the drain {drain_s} s")
    print(
        f"server: {figures['server_starts']} starts ({figures['restarts']} restarts), {figures['kills']} kill -9, "
        f"peak RSS (VmHWM) max {figures['peak_rss_mib']['max']} MiB, median {figures['peak_rss_mib']['median']} MiB "
        f"over {len(peaks)} processes; start to listening {min(x['start_s'] for x in server.lives)}–"
        f"{max(x['start_s'] for x in server.lives)} s"
    )
    print(
        f"documents: acknowledged {len(chaos.documents)} = ready {docs.get('ready', 0)} + failed "
        f"{docs.get('failed', 0)} + cancelled {docs.get('cancelled', 0)} + deleted {docs.get('deleted', 0)} "
        f"+ lost {docs.get('lost', 0)}; by kind {dict(sorted(kinds.items()))}"
    )
    for reason, n in failures.most_common():
        print(f"  failed ×{n}: {reason}")
    print(
        f"  uploads cut off before their 202: {chaos.unacknowledged_uploads}; stored anyway: "
        f"{sum(checks['unacknowledged_stored'].values())} {checks['unacknowledged_stored']}"
    )
    print(
        f"answers: asked {len(chaos.asks)} = refused {answers.get('refused', 0)} + not recorded "
        f"{answers.get('not recorded', 0)} + started {answers.get('started', 0)} + lost {answers.get('lost', 0)}; "
        f"started = settled {answers.get('settled', 0)} + stuck {answers.get('stuck', 0)}; "
        f"final states {dict(finals)}"
    )
    for reason, n in errors.most_common():
        print(f"  ×{n}: {reason}")
    print(f"  about documents deleted, failed or cancelled: {dict(about_unready) or 'none'}")
    after = [
        f"{a['tag']} {'streamed' if a['stream'] else 'plain'}: {a['client']} -> {a.get('server_status')}"
        for a in chaos.asks
        if a.get("after_the_chaos")
    ]
    print(f"  after the drain: {'; '.join(after) or 'no ready document to ask about'}")
    print(
        f"integrity: chunks database {checks['database_chunks']}, BM25 {checks['bm25_chunks']}, dense "
        f"{checks['dense_chunks']}, sum of ready documents' chunk_count {checks['ready_chunk_count_sum']}; "
        f"scoped searches {checks['scoped_searches_ok']}/{checks['ready_documents']} ready documents; "
        f"hits on documents not ready {checks['stray_hits']}"
    )
    print(f"load average before {load_before}, after {load_after}")
    for problem in figures["problems"]:
        print(f"PROBLEM: {problem}")
    verdict = "FAIL" if lost or stuck or integrity_problems or doc_problems else "OK"
    print(f"lost {lost}, stuck {stuck}, integrity problems {len(integrity_problems) + len(doc_problems)}: {verdict}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1, ensure_ascii=False, default=str)
    if args.keep or verdict == "FAIL":
        print(f"kept {work} (data/ and server.log)")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if verdict == "FAIL" else 0


if __name__ == "__main__":
    raise SystemExit(main())
