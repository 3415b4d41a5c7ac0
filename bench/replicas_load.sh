#!/usr/bin/env bash
# Replicas behind HAProxy on one PostgreSQL: `/v1/search` throughput and latency through the load balancer
# with 1, 2 and 3 `docqa serve` replicas (each with its own data directory), then the index convergence
# delay: 100 documents ingested through replica 1, each timed until replica 2 finds it. Runs
# `deploy/haproxy.cfg` as shipped, with the server lines of absent replicas removed.
#
#   cargo build --release --bin docqa && bench/replicas_load.sh
#
# Needs PostgreSQL (`.ci/postgres.sh` starts one), haproxy and wrk (Debian packages). Settings:
# DURATION (seconds of load per replica count, default 20), CONNECTIONS (default 16), DOCS (convergence
# samples, default 100), POLL_MS (the replicas' --index-poll-ms, default 1000).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-20}
CONNECTIONS=${CONNECTIONS:-16}
DOCS=${DOCS:-100}
POLL_MS=${POLL_MS:-1000}
DATA=${DOCQA_DATA:-../shared/data}
ADMIN=dq_bench_admin_key_0123456789abcdef
PG=${DOCQA_TEST_POSTGRES_URL:-$(.ci/postgres.sh)}
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# A fresh database for this run.
db="docqa_bench_$$"
psql "$PG" -q -c "CREATE DATABASE $db" >/dev/null
url="${PG%/*}/$db"

start_replica() { # index -> address
    local i=$1 p
    p=$(port)
    DOCQA_ADMIN_KEY=$ADMIN ./target/release/docqa serve --bind "127.0.0.1:$p" --data-dir "$work/r$i" \
        --database-url "$url" --local-mode off --rate-limit-per-minute 0 --index-poll-ms "$POLL_MS" \
        >"$work/r$i.out" 2>"$work/r$i.err" &
    pids+=($!)
    for _ in $(seq 1 480); do grep -q "listening on" "$work/r$i.out" 2>/dev/null && break; sleep 0.5; done
    echo "127.0.0.1:$p"
}

addr1=$(start_replica 1)
key=$(curl -s -H "Authorization: Bearer $ADMIN" -H 'content-type: application/json' -d '{"name": "bench"}' \
    "http://$addr1/v1/tenants" | python3 -c 'import json,sys; print(json.load(sys.stdin)["api_key"]["key"])')
auth="Authorization: Bearer $key"

python3 - "$DATA/qa/squad2_articles_dev.jsonl" "$work" <<'PY'
import json, sys
src, work = sys.argv[1], sys.argv[2]
articles = [json.loads(l) for l in open(src)][:4]
for i, a in enumerate(articles):
    open(f"{work}/doc{i}.txt", "w").write(a["text"])
qs = [q["question"] for a in articles for q in a["questions"]][:64]
lua = "local qs = " + json.dumps(qs).replace("[", "{").replace("]", "}") + "\n"
lua += """
local n = 0
request = function()
  n = n + 1
  local body = '{"query": ' .. string.format('%q', qs[(n % #qs) + 1]) .. ', "k": 10}'
  return wrk.format("POST", "/v1/search", {["Content-Type"] = "application/json", ["Authorization"] = "Bearer KEY"}, body)
end
"""
open(f"{work}/search.lua", "w").write(lua)
PY
sed -i "s/KEY/$key/" "$work/search.lua"
ingest() { # address file -> job id
    curl -s -H "$auth" -F "file=@$2" "http://$1/v1/documents?allow_duplicate=true" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["job_id"])'
}
wait_job() { until curl -s -H "$auth" "http://$1/v1/jobs/$2" | grep -q '"status":"succeeded"'; do sleep 0.2; done; }
for f in "$work"/doc*.txt; do wait_job "$addr1" "$(ingest "$addr1" "$f")"; done

addrs=("$addr1" "$(start_replica 2)" "$(start_replica 3)")
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); commit $(git rev-parse --short HEAD); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| replicas | requests/s | p50 ms | p99 ms | errors |"
echo "|---|---|---|---|---|"
for n in 1 2 3; do
    lb=$(port)
    cfg="$work/haproxy-$n.cfg"
    absent='$^'
    [ "$n" -lt 3 ] && absent="server replica[$((n + 1))-3] "
    sed -e "/$absent/d" -e '/log stdout/d' -e '/option httplog/d' deploy/haproxy.cfg >"$cfg"
    DOCQA_LB_BIND="127.0.0.1:$lb" DOCQA_REPLICA_1=${addrs[0]} DOCQA_REPLICA_2=${addrs[1]} \
        DOCQA_REPLICA_3=${addrs[2]} haproxy -f "$cfg" >"$work/haproxy-$n.log" 2>&1 &
    hp=$!
    sleep 3
    # Warm every replica's index (the first search opens it), then measure.
    wrk -t2 -c"$CONNECTIONS" -d3s -s "$work/search.lua" "http://127.0.0.1:$lb" >/dev/null
    out=$(wrk -t2 -c"$CONNECTIONS" -d"${DURATION}s" --latency -s "$work/search.lua" "http://127.0.0.1:$lb")
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    p50=$(echo "$out" | awk '$1 == "50%" {print $2}')
    p99=$(echo "$out" | awk '$1 == "99%" {print $2}')
    errors=$(echo "$out" | awk '/Non-2xx|Socket errors/ {printf "%s ", $0}')
    echo "| $n | $rps | $p50 | $p99 | ${errors:-0} |"
    kill "$hp"; wait "$hp" 2>/dev/null || true
done

echo "== convergence: $DOCS documents ingested through replica 1, each timed until replica 2 finds it (poll $POLL_MS ms)"
for i in $(seq 1 "$DOCS"); do
    word="zqx${i}marker$$"
    echo "Convergence sample $i. The code word is $word. It appears in no other document." >"$work/c$i.txt"
    job=$(ingest "$addr1" "$work/c$i.txt")
    wait_job "$addr1" "$job"
    t0=$(date +%s.%N)
    until curl -s -H "$auth" -H 'content-type: application/json' \
        -d "{\"query\": \"$word\", \"k\": 1, \"mode\": \"bm25\"}" "http://${addrs[1]}/v1/search" | grep -q "$word"; do
        sleep 0.02
    done
    echo "$(date +%s.%N) $t0" | awk '{printf "%.3f\n", $1 - $2}'
done >"$work/delays"
sort -n "$work/delays" | awk '{a[NR]=$1} END {printf "delay after the job succeeded: median %.3f s, p90 %.3f s, max %.3f s (%d samples)\n", a[int(NR/2)+1], a[int(NR*0.9)], a[NR], NR}'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
psql "$PG" -q -c "DROP DATABASE $db WITH (FORCE)" >/dev/null 2>&1 || true
