#!/usr/bin/env bash
# The GPU record in one run on the GPU machine: every parity check and docqa's kernel and end-to-end
# timings (`gpu-check --bench`), then their anchors on the same machine (SDPA's attention kernels and the
# copy bandwidth, bench/attention_sdpa.py; HF transformers on the same random weights, bench/hf_generate.py),
# optionally a real shape (bench/real_scale.sh against HF, and gpu-check's decode there), then the targets'
# table (bench/gpu_record.py) in OUT/summary.md.
#
# Usage: bench/gpu_record.sh OUT [docqa] [anchors] [real]   (docqa and anchors when none is named)
# The parts can run in separate calls on the same warm machine: the anchors need the checkpoints the docqa
# part writes into MODELS. Environment: GPU_CHECK (the gpu-check binary, built with --features cuda; default
# target/release/gpu-check), DOCQA (the docqa binary with --features cuda, for `real`; default
# target/release/docqa), DOCQA_CUBIN_DIR (prebuilt kernels), MODELS (default /tmp/gpu-record-models),
# REAL_SHAPE (default llama-3.1-8b) and REAL_LENGTHS (default 8192,32768).
set -uo pipefail
out=${1:?usage: bench/gpu_record.sh OUT [docqa] [anchors] [real]}
shift
parts=${*:-docqa anchors}
gpu_check=${GPU_CHECK:-target/release/gpu-check}
models=${MODELS:-/tmp/gpu-record-models}
here=$(dirname "$0")
mkdir -p "$out" "$models"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader > "$out/gpu.txt"

# Each step's log, its exit status and how long it took; a failed step leaves its rows missing, not the rest.
# While each step runs, nvidia-smi logs the SM and memory clocks, power, temperature and the clock event
# reasons every 50 ms into OUT/clocks-STEP.csv, and the step's line gives the SM clock's range and median,
# so a timing taken under the power cap says so (CLOCKS=0 turns the log off).
# Logs the clocks into OUT/clocks-NAME.csv until killed; prints the logger's pid.
clock_log() {
    local reasons=clocks_event_reasons.active
    nvidia-smi --query-gpu=$reasons --format=csv > /dev/null 2>&1 || reasons=clocks_throttle_reasons.active
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,$reasons \
        --format=csv,noheader,nounits -lms 50 > "$out/clocks-$1.csv" 2> /dev/null &
    echo $!
}

# The SM clock's lowest, median and highest reading in OUT/clocks-NAME.csv.
clock_range() {
    cut -d, -f2 "$out/clocks-$1.csv" 2> /dev/null | tr -d ' ' | grep -E '^[0-9]+$' | sort -n |
        awk '{v[NR] = $1} END {if (NR) printf "SM clock %d-%d MHz, median %d", v[1], v[NR], v[int((NR + 1) / 2)]}'
}

step() {
    local name=$1 start=$SECONDS logger="" status
    shift
    [ "${CLOCKS:-1}" = 0 ] || logger=$(clock_log "$name")
    "$@" > "$out/$name.txt" 2>&1
    status=$?
    [ -z "$logger" ] || { kill "$logger" 2> /dev/null; wait "$logger" 2> /dev/null; }
    echo "$name: exit $status, $((SECONDS - start)) s${logger:+, $(clock_range "$name")}"
}

for part in $parts; do
    case $part in
    docqa) step docqa env DOCQA_BENCH_MODEL_DIR="$models" "$gpu_check" --bench ;;
    anchors)
        step sdpa python3 "$here/attention_sdpa.py"
        step hf python3 "$here/hf_generate.py" "$models"
        ;;
    real)
        shape=${REAL_SHAPE:-llama-3.1-8b}
        step real env DOCQA="${DOCQA:-target/release/docqa}" MODELS="$models/real" CHUNKS=8192 \
            HF_LENGTHS="${REAL_LENGTHS:-8192,32768}" bash "$here/real_scale.sh" "$shape" \
            "${REAL_LENGTHS:-8192,32768}" "$out/real-scale"
        # gpu-check's decode at that shape reads the same checkpoint, under the name it gives its own.
        config="$models/real/$shape/config.json"
        if [ ! -f "$config" ]; then
            echo "real-decode: skipped, no checkpoint at $models/real/$shape (see $out/real.txt)"
            continue
        fi
        layers=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['num_hidden_layers'])" "$config")
        mkdir -p "$models/bench"
        ln -sfn "$models/real/$shape" "$models/bench/$shape-$layers-layers"
        step real-decode env DOCQA_BENCH_MODEL_DIR="$models/bench" DOCQA_BENCH_SHAPES="$shape" \
            DOCQA_BENCH_CASES=1x512,1x8192,32x8192,1x32768,8x32768 "$gpu_check"
        ;;
    *) echo "unknown part $part (docqa, anchors, real)" >&2; exit 2 ;;
    esac
done
logs=()
for name in docqa sdpa hf real real-decode; do
    [ -f "$out/$name.txt" ] && logs+=("$out/$name.txt")
done
python3 "$here/gpu_record.py" "${logs[@]}" | tee "$out/summary.md"
