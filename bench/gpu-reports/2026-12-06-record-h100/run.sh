#!/usr/bin/env bash
# The GPU record when the machine is an H200 (bench/gpu_record.sh: parity, kernels, end to end, anchors).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || exit 0
mkdir -p /tmp/r && xz -dc .dev/r/gpu-check.xz > /tmp/r/gpu-check && xz -dc .dev/r/docqa.xz > /tmp/r/docqa && chmod +x /tmp/r/*
export DOCQA_CUBIN_DIR=$PWD/.dev/r/cubins
GPU_CHECK=/tmp/r/gpu-check DOCQA=/tmp/r/docqa bash bench/gpu_record.sh $OUT/record ${PARTS:-docqa anchors}
cat $OUT/record/summary.md
