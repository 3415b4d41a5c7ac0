#!/usr/bin/env bash
# The 8B shape's first reads at 8K and 32K with the warm-up read after the calibration, beside HF
# transformers on the same weights, with the clocks logged; then every parity check.
set -u
start=$SECONDS
mkdir -p /tmp/stage && cp -r lab2/* /tmp/stage/ && xz -dc /tmp/stage/gpu-check.xz > /tmp/gpu-check && xz -dc /tmp/stage/docqa.xz > /tmp/docqa && chmod +x /tmp/gpu-check /tmp/docqa
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/gpu-name.txt
mkdir -p $OUT/r
f=clocks_event_reasons.active; nvidia-smi --query-gpu=$f --format=csv > /dev/null 2>&1 || f=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,$f --format=csv -lms 50 > $OUT/r/clocks.csv 2>&1 &
clk=$!
DOCQA_CUBIN_DIR=/tmp/stage/cubins DOCQA=/tmp/docqa MODELS=/tmp/m CHUNKS=8192 timeout 320 \
  bash bench/real_scale.sh llama-3.1-8b 8192,32768 $OUT/r/gen
kill $clk
echo "real_scale done at $((SECONDS-start)) s"
DOCQA_CUBIN_DIR=/tmp/stage/cubins timeout 200 /tmp/gpu-check > $OUT/r/parity-full.txt 2>&1; echo "full exit $? at $((SECONDS-start)) s" | tee -a $OUT/r/exits.txt
tail -3 $OUT/r/parity-full.txt
cd $OUT && tar czf r.tgz r && rm -rf r
