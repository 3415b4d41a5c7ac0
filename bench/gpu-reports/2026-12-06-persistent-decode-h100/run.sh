#!/usr/bin/env bash
# Persistent decode: parity against the op-by-op decode, then decode timings with and without it.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p /tmp/r && xz -dc .dev/p2/gpu-check.xz > /tmp/r/gpu-check && chmod +x /tmp/r/gpu-check
export DOCQA_CUBIN_DIR=$PWD/.dev/p2/cubins
timeout 150 /tmp/r/gpu-check --persistent-only > $OUT/parity.txt 2>&1; rc=$?; echo "exit $rc" >> $OUT/parity.txt
cat $OUT/parity.txt
[ $rc = 124 ] && { echo "parity timed out: no timings"; exit 1; }
DOCQA_BENCH_DECODE=products timeout 240 /tmp/r/gpu-check > $OUT/products.txt 2>&1; echo "exit $?" >> $OUT/products.txt
grep -E "decode batch|graph|exit|bench" $OUT/products.txt
