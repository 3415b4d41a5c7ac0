#!/usr/bin/env bash
# `docqa serve` driven with curl as a new user would, on one document: start the service on a fresh data
# directory, upload the document, wait for its ingestion job, then ask a question and let the router choose
# the path, ask it again (the prompt's KV reused), ask a second question (by then the engine has measured its
# pace, so the reasons estimate each read's seconds), ask the first on the long path, the second there (the
# document's KV cached), ask something the document does not say, delete the document and ask once more.
# Prints every answer with its route, reasons (the estimates among them), timings and first citations, the
# HTTP status of each call, and the engine's counters from /metrics.
#
#   bench/serve_user_check.sh DOCQA MODELS_DIR DOCUMENT OUT_DIR
#
# DOCQA is a docqa binary (built with `--features cuda` for the default DEVICE=cuda; DEVICE=cpu runs the CPU
# engine); MODELS_DIR holds the generator, embedder and reader directories (a machine without network needs
# them there already). QUESTION, NEXT_QUESTION and OFF_TOPIC override the questions, which suit libtasn1's
# manual (Debian's libtasn1-doc). MODEL serves that model directory instead of the default generator
# (`docqa serve --model`), MAX_TOKENS caps each answer, LONG=0 leaves out the two questions on the long
# path (a whole manual read on two CPU cores takes minutes). OUT_DIR receives the server's log. Needs curl and
# python3.
set -u
docqa=${1:?usage: $0 DOCQA MODELS_DIR DOCUMENT OUT_DIR}
models=${2:?models dir}
document=${3:?document}
out=${4:?out dir}
question=${QUESTION:-What does asn1_parser2tree do?}
next_question=${NEXT_QUESTION:-Which function deletes a structure created by asn1_create_element?}
off_topic=${OFF_TOPIC:-Who won the 1998 World Cup?}
mkdir -p "$out"
work=$(mktemp -d)
model=()
[ -n "${MODEL:-}" ] && model=(--model "$MODEL")
"$docqa" serve --device "${DEVICE:-cuda}" --models-dir "$models" "${model[@]}" --data-dir "$work/data" \
    --bind 127.0.0.1:0 >"$work/stdout" 2>"$out/serve-log.txt" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 240); do grep -q "listening on" "$work/stdout" 2>/dev/null && break; sleep 0.5; done
base=$(sed -n 's/^docqa listening on //p' "$work/stdout" | head -1)
[ -n "$base" ] || { echo "the server did not start:"; cat "$out/serve-log.txt"; exit 1; }
grep -i "generator on\|embedder on\|models loaded" "$out/serve-log.txt"

field() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
started=$(date +%s.%N)
upload=$(curl -s -F "file=@$document" "$base/v1/documents")
echo "upload: $upload"
job=$(echo "$upload" | field "['job_id']")
doc=$(echo "$upload" | field "['document_id']")
for _ in $(seq 1 3000); do
    status=$(curl -s "$base/v1/jobs/$job" | field "['status']")
    [ "$status" = succeeded ] || [ "$status" = failed ] && break
    sleep 0.2
done
took=$(python3 -c "import sys, time; print(round(time.time() - float(sys.argv[1]), 1))" "$started")
echo "job $status after $took s; document: $(curl -s "$base/v1/documents/$doc" | head -c 400)"

# ask QUESTION [ROUTE]: the answer as the API returns it, or the error body, with the HTTP status.
ask() {
    python3 -c 'import json, sys
body = {"question": sys.argv[1], "scope": {"document_ids": [sys.argv[2]]}}
if sys.argv[3]:
    body["route"] = sys.argv[3]
if sys.argv[4]:
    body["max_tokens"] = int(sys.argv[4])
print(json.dumps(body))' "$1" "$doc" "${2:-}" "${MAX_TOKENS:-}" >"$work/question.json"
    curl -s -w '\nHTTP %{http_code}\n' -H 'content-type: application/json' --data @"$work/question.json" \
        "$base/v1/ask" >"$work/answer.txt"
    python3 - "$work/answer.txt" <<'PY'
import json, sys
body, code = open(sys.argv[1]).read().rsplit("\nHTTP ", 1)
print("HTTP", code.strip())
a = json.loads(body)
if "answer" not in a:
    sys.exit(print(" ", json.dumps(a)[:400]))
print(" answer:", repr(a["answer"]))
print(" route:", a["route"], a.get("route_reasons"))
print(" timings:", a["timings"], "usage:", a.get("usage"))
for c in a["citations"][:3]:
    print("  cites page", c["page_start"], "chars", c["char_start"], c["char_end"], repr(c["quote"][:70]))
PY
}
echo "== the router decides"; ask "$question"
echo "== the same question again"; ask "$question"
echo "== a second question"; ask "$next_question"
if [ "${LONG:-1}" = 1 ]; then
    echo "== the first question on the long path"; ask "$question" long
    echo "== the second question on the long path (the document's KV cached)"; ask "$next_question" long
fi
echo "== a question the document does not answer"; ask "$off_topic"
echo "== delete: HTTP $(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$base/v1/documents/$doc")"
echo "== the first question after the delete"; ask "$question"
echo "engine: $(curl -s "$base/metrics" | grep -E '^docqa_engine_(graph_replays|computed_tokens|prefill_tokens_per_second) ' | tr '\n' ' ')"
