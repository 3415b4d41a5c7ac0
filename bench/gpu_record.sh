#!/usr/bin/env bash
# The Hopper record in one run on the GPU machine: every parity check and docqa's kernel and end-to-end
# timings (`gpu-check --bench`), then their anchors on the same machine (SDPA's attention kernels and the
# copy bandwidth, bench/attention_sdpa.py; HF transformers on the same random weights, bench/hf_generate.py),
# then the targets' table (bench/gpu_record.py) in OUT/summary.md.
#
# Usage: bench/gpu_record.sh OUT [docqa] [anchors]   (both parts when none is named)
# The two parts can run in two calls on the same warm machine: the anchors need the checkpoints the docqa part
# writes into MODELS. Environment: GPU_CHECK (the gpu-check binary, built with --features cuda; default
# target/release/gpu-check), DOCQA_CUBIN_DIR (prebuilt kernels), MODELS (default /tmp/gpu-record-models).
set -uo pipefail
out=${1:?usage: bench/gpu_record.sh OUT [docqa] [anchors]}
shift
parts=${*:-docqa anchors}
gpu_check=${GPU_CHECK:-target/release/gpu-check}
models=${MODELS:-/tmp/gpu-record-models}
here=$(dirname "$0")
mkdir -p "$out" "$models"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader > "$out/gpu.txt"

# Each step's log, its exit status and how long it took; a failed step leaves its rows missing, not the rest.
step() {
    local name=$1 start=$SECONDS
    shift
    "$@" > "$out/$name.txt" 2>&1
    echo "$name: exit $?, $((SECONDS - start)) s"
}

for part in $parts; do
    case $part in
    docqa) step docqa env DOCQA_BENCH_MODEL_DIR="$models" "$gpu_check" --bench ;;
    anchors)
        step sdpa python3 "$here/attention_sdpa.py"
        step hf python3 "$here/hf_generate.py" "$models"
        ;;
    *) echo "unknown part $part (docqa, anchors)" >&2; exit 2 ;;
    esac
done
logs=()
for name in docqa sdpa hf; do
    [ -f "$out/$name.txt" ] && logs+=("$out/$name.txt")
done
python3 "$here/gpu_record.py" "${logs[@]}" | tee "$out/summary.md"
