#!/usr/bin/env bash
# The GPU record on whatever card came (bench/gpu_record.sh: parity, kernels, end to end, anchors), with the
# build of c145c68 (gpu-check, cubins; the docqa binary of 1cf0379, which the record's parts do not run).
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/r && xz -dc .dev/r/gpu-check.xz > /tmp/r/gpu-check && xz -dc .dev/r/docqa.xz > /tmp/r/docqa && chmod +x /tmp/r/*
export DOCQA_CUBIN_DIR=$PWD/.dev/r/cubins
GPU_CHECK=/tmp/r/gpu-check DOCQA=/tmp/r/docqa timeout 420 bash bench/gpu_record.sh $OUT/record ${PARTS:-docqa anchors}
cat $OUT/record/summary.md
