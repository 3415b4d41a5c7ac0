#!/usr/bin/env bash
# Products through cuBLASLt with an algorithm per size class of rows, with the build of 6965a0d (gpu-check,
# docqa): the whole gpu-check (parity), then bench/reading_estimates.sh at the Llama-3.2-1B shape with it and
# with plain cuBLAS (DOCQA_CUDA_LT_GEMM=0), in that order; the logs packed into one archive.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu-name.txt
mkdir -p /tmp/r /tmp/o && xz -dc .dev/r/docqa.xz > /tmp/r/docqa && xz -dc .dev/r/gpu-check.xz > /tmp/r/gpu-check && chmod +x /tmp/r/*
export DOCQA_CUBIN_DIR=$PWD/.dev/r/cubins
timeout 90 /tmp/r/gpu-check > /tmp/o/gpu-check.txt 2>&1; echo "gpu-check exit $?"; tail -4 /tmp/o/gpu-check.txt
(cd /tmp/o && tar cJf $OUT/logs.tar.xz .)
timeout 25 bash bench/reading_estimates.sh /tmp/r/docqa /tmp/o/lt llama-3.2-1b
DOCQA_CUDA_LT_GEMM=0 timeout 25 bash bench/reading_estimates.sh /tmp/r/docqa /tmp/o/cublas llama-3.2-1b
(cd /tmp/o && tar cJf $OUT/logs.tar.xz .)
