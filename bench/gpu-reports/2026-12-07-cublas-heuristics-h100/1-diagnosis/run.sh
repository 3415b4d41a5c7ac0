#!/usr/bin/env bash
# Which one-off cost a prefill step of a new row count pays on the GPU, with the build of 4f4f0a5 (docqa):
# bench/reading_estimates.sh as it is, with cuBLAS's heuristics cache off (CUBLASLT_HEURISTICS_CACHE_CAPACITY=0),
# and with every module loaded at start (CUDA_MODULE_LOADING=EAGER); the logs packed into one archive.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/gpu-name.txt
mkdir -p /tmp/r /tmp/o && xz -dc .dev/r/docqa.xz > /tmp/r/docqa && chmod +x /tmp/r/*
export DOCQA_CUBIN_DIR=$PWD/.dev/r/cubins
timeout 60 bash bench/reading_estimates.sh /tmp/r/docqa /tmp/o/base llama-3.2-1b smollm2-135m
CUBLASLT_HEURISTICS_CACHE_CAPACITY=0 timeout 60 bash bench/reading_estimates.sh /tmp/r/docqa /tmp/o/no-heuristics-cache llama-3.2-1b smollm2-135m
CUDA_MODULE_LOADING=EAGER timeout 90 bash bench/reading_estimates.sh /tmp/r/docqa /tmp/o/eager llama-3.2-1b smollm2-135m
(cd /tmp/o && tar cJf $OUT/logs.tar.xz .)
