#!/usr/bin/env bash
# The reading estimates (bench/reading_estimates.sh), the GPU record (bench/gpu_record.sh: parity, kernels, end
# to end, anchors), then its real part at the Llama-3.1-8B shape while time allows, in one call on whatever
# card came, with the build of cbf3e9c (gpu-check, docqa, cubins); the logs packed into one archive.
set -u
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu-name.txt
mkdir -p /tmp/r /tmp/o && xz -dc .dev/r/gpu-check.xz > /tmp/r/gpu-check && xz -dc .dev/r/docqa.xz > /tmp/r/docqa && chmod +x /tmp/r/*
export DOCQA_CUBIN_DIR=$PWD/.dev/r/cubins
pack() { (cd /tmp/o && tar cJf $OUT/logs.tar.xz .); }
timeout 150 bash bench/reading_estimates.sh /tmp/r/docqa /tmp/o/est; echo "est done at $((SECONDS-start)) s"; pack
GPU_CHECK=/tmp/r/gpu-check DOCQA=/tmp/r/docqa timeout 330 bash bench/gpu_record.sh /tmp/o/record docqa anchors
echo "record done at $((SECONDS-start)) s"; pack; cp /tmp/o/record/summary.md $OUT/ 2>/dev/null
left=$((570 - (SECONDS-start)))
if [ "${REAL:-1}" = 1 ] && [ $left -gt 200 ]; then
  GPU_CHECK=/tmp/r/gpu-check DOCQA=/tmp/r/docqa timeout $left bash bench/gpu_record.sh /tmp/o/record real
  echo "real done at $((SECONDS-start)) s"; pack; cp /tmp/o/record/summary.md $OUT/ 2>/dev/null
fi
