#!/usr/bin/env bash
# The item helper (new) against the kernels as committed (base): prefill timings interleaved, then parity.
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
xz -dc .dev/ab/gpu-check.xz > /tmp/gc && chmod +x /tmp/gc
for round in 1 2; do
  for v in base new; do
    DOCQA_CUBIN_DIR=$PWD/.dev/ab/$v DOCQA_BENCH_PREFILL=wgmma timeout 200 /tmp/gc > $OUT/wgmma-$v-$round.txt 2>&1; echo "wgmma $v $round: exit $?"
  done
done
for v in base new; do
  DOCQA_CUBIN_DIR=$PWD/.dev/ab/$v DOCQA_BENCH_PREFILL=int8 timeout 200 /tmp/gc > $OUT/int8-$v.txt 2>&1; echo "int8 $v: exit $?"
done
DOCQA_CUBIN_DIR=$PWD/.dev/ab/new timeout 300 /tmp/gc > $OUT/parity-new.txt 2>&1; echo "parity: exit $?"; tail -1 $OUT/parity-new.txt
