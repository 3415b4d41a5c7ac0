#!/usr/bin/env bash
# Load on a real `docqa serve` over loopback with wrk: the health endpoint's throughput, then 16 concurrent
# streamed `ask` requests (RAG path, CPU engine). Prints wrk's figures, the error counts, and the server's
# resident memory before and after. Needs wrk (Debian package `wrk`) and a release build:
#
#   cargo build --release --bin docqa && bench/serve_load.sh
#
# Settings: DURATION (seconds of ask load, default 120), RAG_WINDOW (default 2048), MAX_TOKENS (default 32).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-120}
RAG_WINDOW=${RAG_WINDOW:-2048}
MAX_TOKENS=${MAX_TOKENS:-32}
DATA=${DOCQA_DATA:-../shared/data}
work=$(mktemp -d)
trap 'kill $(cat "$work/pid" 2>/dev/null) 2>/dev/null || true; rm -rf "$work"' EXIT

./target/release/docqa serve --bind 127.0.0.1:0 --data-dir "$work/data" --local-mode on \
    --rate-limit-per-minute 0 --rag-window "$RAG_WINDOW" >"$work/out" 2>"$work/err" &
echo $! >"$work/pid"
for _ in $(seq 1 240); do grep -q "listening on" "$work/out" 2>/dev/null && break; sleep 0.5; done
base=$(sed -n 's/^docqa listening on //p' "$work/out" | head -1)
pid=$(cat "$work/pid")
rss() { awk '/VmRSS/ {printf "%.0f MiB", $2/1024}' "/proc/$pid/status"; }

python3 - "$DATA/qa/squad2_articles_dev.jsonl" "$work" <<'PY'
import json, sys
src, work = sys.argv[1], sys.argv[2]
articles = [json.loads(l) for l in open(src)][:4]
for i, a in enumerate(articles):
    open(f"{work}/doc{i}.txt", "w").write(a["text"])
qs = [q["question"] for a in articles for q in a["questions"] if q.get("answers")][:64]
lua = "local qs = " + json.dumps(qs).replace("[", "{").replace("]", "}") + "\n"
lua += """
local n = 0
request = function()
  n = n + 1
  local body = '{"question": ' .. string.format('%q', qs[(n % #qs) + 1]) ..
    ', "route": "rag", "stream": true, "max_tokens": MAXTOK}'
  return wrk.format("POST", "/v1/ask", {["Content-Type"] = "application/json"}, body)
end
"""
open(f"{work}/ask.lua", "w").write(lua)
json.dump(qs, open(f"{work}/questions.json", "w"))
PY
sed -i "s/MAXTOK/$MAX_TOKENS/" "$work/ask.lua"
for f in "$work"/doc*.txt; do
    job=$(curl -s -F "file=@$f" "$base/v1/documents?allow_duplicate=true" | python3 -c 'import json,sys; print(json.load(sys.stdin)["job_id"])')
    until curl -s "$base/v1/jobs/$job" | grep -q '"status":"succeeded"'; do sleep 0.5; done
done
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); commit $(git rev-parse --short HEAD)"
echo "rss after ingesting 4 SQuAD articles: $(rss)"

echo "== anchor: one streamed ask at a time (same questions, same settings), 5 in a row"
for i in 1 2 3 4 5; do
    q=$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))[int(sys.argv[2])]))' "$work/questions.json" "$i")
    curl -s -o /dev/null -w "single ask %{time_total} s\n" -H 'content-type: application/json' \
        -d "{\"question\": $q, \"route\": \"rag\", \"stream\": true, \"max_tokens\": $MAX_TOKENS}" "$base/v1/ask"
done

echo "== GET /healthz: wrk -t2 -c64 -d15s"
wrk -t2 -c64 -d15s "$base/healthz"

echo "== POST /v1/ask (stream, rag, window $RAG_WINDOW, max_tokens $MAX_TOKENS): wrk -t2 -c16 -d${DURATION}s"
wrk -t2 -c16 -d"${DURATION}s" --timeout 120s --latency -s "$work/ask.lua" "$base"
echo "rss after the ask load: $(rss)"
curl -s "$base/metrics" | grep -E '^docqa_(answers_total|http_requests_total\{method="POST",route="/v1/ask"|engine_prefix_cache_hit_rate|engine_kv_blocks)'
