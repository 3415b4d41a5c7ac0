#!/usr/bin/env bash
# cuBLASLt re-timing: the record (docqa + anchors, then the real 8B part), then the reading estimates at both shapes
set -u
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu-name.txt
mkdir -p /tmp/r /tmp/o && xz -dc .dev/r/gpu-check.xz > /tmp/r/gpu-check && xz -dc .dev/r/docqa.xz > /tmp/r/docqa && chmod +x /tmp/r/*
export DOCQA_CUBIN_DIR=$PWD/.dev/r/cubins
pack() { (cd /tmp/o && tar cJf $OUT/logs.tar.xz .); }
GPU_CHECK=/tmp/r/gpu-check DOCQA=/tmp/r/docqa timeout 300 bash bench/gpu_record.sh /tmp/o/record docqa anchors
echo "record done at $((SECONDS-start)) s"; pack; cp /tmp/o/record/summary.md $OUT/ 2>/dev/null
GPU_CHECK=/tmp/r/gpu-check DOCQA=/tmp/r/docqa timeout 180 bash bench/gpu_record.sh /tmp/o/record real
echo "real done at $((SECONDS-start)) s"; pack; cp /tmp/o/record/summary.md $OUT/ 2>/dev/null
left=$((585 - (SECONDS-start)))
[ $left -gt 30 ] && timeout $left bash bench/reading_estimates.sh /tmp/r/docqa /tmp/o/est
echo "est done at $((SECONDS-start)) s"; pack
