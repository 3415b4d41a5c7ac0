#!/usr/bin/env python3
"""First contact, timed as a new user meets docqa: a fresh `docqa serve` (SQLite, the CPU default),
one document uploaded, then questions asked with `stream: true`. For each server setting given with
--setting (extra `docqa serve` flags, e.g. "" for the defaults and "--rag-window 8192" as an anchor),
it prints the upload-to-ready time and, per question, the time to the first progress event, the first
answer token and the final answer, the route, the prompt tokens and the finish reason.

    python3 bench/first_contact.py --docqa target/release/docqa \
        --qmsum ../shared/data/qa/qmsum_val.jsonl --chars 43000 --setting "" --setting "--rag-window 8192"

Only the standard library: the server is reached over HTTP on loopback.
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import tempfile
import threading
import time
import urllib.request


def request(base, method, path, body=None, headers=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    return urllib.request.urlopen(req, timeout=600)


def upload(base, name, text):
    boundary = "docqa-bench-boundary"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
        f"Content-Type: text/plain\r\n\r\n{text}\r\n--{boundary}--\r\n"
    ).encode()
    req = urllib.request.Request(base + "/v1/documents?allow_duplicate=true", data=body, method="POST")
    req.add_header("Content-Type", f"multipart/form-data; boundary={boundary}")
    return json.load(urllib.request.urlopen(req, timeout=600))


def ask_streaming(base, document_id, question):
    """Times one streamed answer: first progress, first token, final answer (seconds from the ask)."""
    body = {"question": question, "stream": True, "scope": {"document_ids": [document_id]}}
    start = time.monotonic()
    times = {"first_progress_s": None, "first_token_s": None}
    event = None
    with request(base, "POST", "/v1/ask", body) as res:
        for raw in res:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                now = time.monotonic() - start
                if event == "progress" and times["first_progress_s"] is None:
                    times["first_progress_s"] = round(now, 2)
                elif event == "token" and times["first_token_s"] is None:
                    times["first_token_s"] = round(now, 2)
                elif event == "answer":
                    answer = json.loads(line[6:])
                    return {
                        **times,
                        "final_s": round(now, 2),
                        "route": answer["route"],
                        "prompt_tokens": answer["usage"]["prompt_tokens"],
                        "answer_tokens": answer["usage"]["completion_tokens"],
                        "finish_reason": answer["finish_reason"],
                        "answer": answer["answer"][:160],
                    }
                elif event == "error":
                    raise RuntimeError(line)
    raise RuntimeError("the stream ended without an answer")


def serve(docqa, flags, data_dir):
    args = [docqa, "serve", "--bind", "127.0.0.1:0", "--data-dir", data_dir, "--local-mode", "on"]
    proc = subprocess.Popen(args + shlex.split(flags), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        found = re.search(r"listening on (http://\S+)", line)
        if found:
            # Keep reading its output so the server never blocks on a full pipe.
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, found.group(1)
    raise RuntimeError("docqa serve did not start")


def run_setting(args, flags, text, questions):
    with tempfile.TemporaryDirectory() as data_dir:
        proc, base = serve(args.docqa, flags, data_dir)
        try:
            start = time.monotonic()
            up = upload(base, "meeting.txt", text)
            while True:
                job = json.load(request(base, "GET", f"/v1/jobs/{up['job_id']}"))
                if job["status"] in ("succeeded", "failed", "cancelled"):
                    break
                time.sleep(0.2)
            ready = round(time.monotonic() - start, 2)
            if job["status"] != "succeeded":
                raise RuntimeError(f"ingestion {job['status']}: {job}")
            answers = [ask_streaming(base, up["document_id"], q) for q in questions]
            return {"setting": flags or "(defaults)", "upload_to_ready_s": ready, "answers": answers}
        finally:
            proc.terminate()
            proc.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docqa", default="target/release/docqa")
    p.add_argument("--qmsum", required=True, help="qmsum_val.jsonl: its first meeting is the document")
    p.add_argument("--chars", type=int, default=43000, help="characters of the meeting kept")
    p.add_argument("--questions", type=int, default=2, help="the meeting's first specific questions")
    p.add_argument("--setting", action="append", default=[], help="extra docqa serve flags")
    args = p.parse_args()
    with open(args.qmsum) as f:
        meeting = json.loads(f.readline())
    text = meeting["text"][: args.chars]
    questions = [q["question"] for q in meeting["questions"] if q["evidence"]][: args.questions]
    print(json.dumps({"load_average_before": os.getloadavg(), "document_chars": len(text)}), flush=True)
    for flags in args.setting or [""]:
        print(json.dumps(run_setting(args, flags, text, questions), ensure_ascii=False), flush=True)
    print(json.dumps({"load_average_after": os.getloadavg()}))


if __name__ == "__main__":
    main()
