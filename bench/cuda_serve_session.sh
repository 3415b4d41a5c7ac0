#!/usr/bin/env bash
# `docqa serve --device cuda` end to end, as a user drives it: start the service with the generator on GPU 0,
# upload a document over HTTP, wait for its ingestion, then ask a question on the RAG path and twice on the
# long path (the second time from the document's cached KV, with NEXT_QUESTION when it is set), and print each
# answer with its route, reasons, citations, time to first token and token counts, then the engine's decode
# steps replayed from CUDA graphs and tokens computed (from /metrics). Exits non-zero when a step fails or an
# answer is empty.
#
#   bench/cuda_serve_session.sh DOCQA MODELS_DIR DOCUMENT QUESTION [OUT_DIR]
#
# DOCQA is a docqa built with `--features cuda`; MODELS_DIR holds the two model directories (a machine without
# network needs them there already). OUT_DIR (default: a temporary folder) receives serve.log and the answers
# as answer-*.json. Needs curl and python3. RAG_WINDOW (default 2048) keeps the RAG path's window below the
# document's length, so the two paths read different text. DEVICE=cpu runs the same session on the CPU engine.
# TEMPERATURE (default 0, greedy) samples the answers (seed 7); DOCQA_KV_DTYPE=int8 serves with an int8 KV cache.
set -euo pipefail
docqa=${1:?usage: $0 DOCQA MODELS_DIR DOCUMENT QUESTION [OUT_DIR]}
models=${2:?models dir}
document=${3:?document}
question=${4:?question}
out=${5:-$(mktemp -d)}
mkdir -p "$out"
work=$(mktemp -d)
trap 'kill "$(cat "$work/pid" 2>/dev/null)" 2>/dev/null || true; rm -rf "$work"' EXIT

"$docqa" serve --device "${DEVICE:-cuda}" --models-dir "$models" --data-dir "$work/data" --bind 127.0.0.1:0 \
    --local-mode on --rag-window "${RAG_WINDOW:-2048}" >"$work/stdout" 2>"$out/serve.log" &
echo $! >"$work/pid"
for _ in $(seq 1 240); do grep -q "listening on" "$work/stdout" 2>/dev/null && break; sleep 0.5; done
base=$(sed -n 's/^docqa listening on //p' "$work/stdout" | head -1)
[ -n "$base" ] || { echo "the server did not start:"; cat "$out/serve.log"; exit 1; }
grep -i "generator on\|embedder on\|models loaded" "$out/serve.log" || true

field() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
uploaded=$(date +%s.%N)
id=$(curl -sf -F "file=@$document" "$base/v1/documents?allow_duplicate=true" | field "['document_id']")
for _ in $(seq 1 3000); do
    status=$(curl -sf "$base/v1/documents/$id" | field "['status']")
    [ "$status" = ready ] && break
    [ "$status" = failed ] && { echo "ingestion failed"; exit 1; }
    sleep 0.1
done
took=$(python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$uploaded")
echo "document $id: $(curl -sf "$base/v1/documents/$id" | field "['token_count']") tokens, $status after ${took} s"

ask() {
    local route=$1 name=$2 question=${3:-$question}
    python3 -c 'import json,sys; print(json.dumps({"question": sys.argv[1], "route": sys.argv[2],
        "max_tokens": 48, "temperature": float(sys.argv[4]), "seed": 7,
        "scope": {"document_ids": [sys.argv[3]]}}))' \
        "$question" "$route" "$id" "${TEMPERATURE:-0}" >"$work/body.json"
    curl -sf -H 'content-type: application/json' --data @"$work/body.json" "$base/v1/ask" >"$out/answer-$name.json"
    python3 - "$out/answer-$name.json" "$name" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))
print(f"== {sys.argv[2]}: route {a['route']}; {'; '.join(a['route_reasons'])}")
print(f"   answer: {a['answer']!r}")
print(f"   timings: {a['timings']}")
print(f"   usage: {a['usage']}")
for c in a["citations"][:3]:
    print(f"   cites page {c['page_start']} chars {c['char_start']}-{c['char_end']}: {c['quote'][:80]!r}")
if not a["answer"].strip():
    sys.exit("empty answer")
PY
}
ask rag rag
ask long long-cold
ask long long-cached "${NEXT_QUESTION:-$question}"
echo "engine: $(curl -sf "$base/metrics" | grep -E '^docqa_engine_(graph_replays|computed_tokens) ' | tr '\n' ' ')"
