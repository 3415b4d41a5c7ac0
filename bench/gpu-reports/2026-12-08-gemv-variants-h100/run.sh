#!/usr/bin/env bash
# Lab: decode products and the 8B decode step with gemv.cu builds (current; e3a7666's; current without
# the one-pass norm; blocks of 4 and of 16 warps), interleaved; then the 8B's 8K read with clocks logged.
set -u
start=$SECONDS
mark() { echo "== $* $(date +%T.%N) at $((SECONDS-start)) s" | tee -a $OUT/marks.txt; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/gpu-name.txt
mkdir -p /tmp/stage && cp -r lab/* /tmp/stage/ && cd /tmp/stage || exit 1
xz -dc docqa.xz > /tmp/docqa && xz -dc gpu-check.xz > /tmp/gpu-check && chmod +x /tmp/docqa /tmp/gpu-check
cd - > /dev/null
V="cur old nop w4 w16"
for v in $V; do mkdir -p /tmp/v/$v && cp /tmp/stage/cubins/* /tmp/v/$v/ && cp /tmp/stage/$v/gemv.sm_90a.cubin /tmp/v/$v/; done
md5sum /tmp/v/*/gemv.sm_90a.cubin | tee $OUT/cubins.txt
f=clocks_event_reasons.active; nvidia-smi --query-gpu=$f --format=csv > /dev/null 2>&1 || f=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,$f --format=csv -lms 50 > $OUT/clocks.csv 2>&1 &
clk=$!
(mark synth; /tmp/docqa models synth --shape llama-3.1-8b --seed 1 --out /tmp/m/real/llama-3.1-8b > /dev/null; mark synth done) &
syn=$!
for v in $V; do
  mark products $v
  DOCQA_CUBIN_DIR=/tmp/v/$v DOCQA_BENCH_DECODE=products timeout 100 /tmp/gpu-check > $OUT/products-$v.txt 2>&1
done
grep -h "blocks of\|us .*TB/s\|decode batch" $OUT/products-*.txt | head -80
wait $syn
mkdir -p /tmp/m/bench && ln -sfn /tmp/m/real/llama-3.1-8b /tmp/m/bench/llama-3.1-8b-32-layers
for r in 1 2; do for v in cur old nop w4; do
  mark decode8b $v round $r
  echo "== $v round $r" >> $OUT/decode8b.txt
  DOCQA_CUBIN_DIR=/tmp/v/$v DOCQA_BENCH_MODEL_DIR=/tmp/m/bench DOCQA_BENCH_SHAPES=llama-3.1-8b DOCQA_BENCH_CASES=1x512 \
    timeout 60 /tmp/gpu-check >> $OUT/decode8b.txt 2>&1
done; done
grep -E "^==|decode batch" $OUT/decode8b.txt
mark generate
sleep 5
DOCQA_CUBIN_DIR=/tmp/v/cur DOCQA=/tmp/docqa MODELS=/tmp/m/real CHUNKS=8192 HF_LENGTHS=none timeout 120 \
  bash bench/real_scale.sh llama-3.1-8b 8192 $OUT/gen
mark done
sleep 1; kill $clk
echo "lab done at $((SECONDS-start)) s"
