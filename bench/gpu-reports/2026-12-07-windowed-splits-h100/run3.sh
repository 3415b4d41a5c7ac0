#!/usr/bin/env bash
# One call: the Llama-3.1-8B shape's 120K meeting read whole after the calibrating warm-up (eight chunks),
# then the SmolLM2 shape's through an 8,188-token sink window with the default split policy.
set -u
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $OUT/gpu-name.txt
mkdir -p /tmp/stage && cp -r .dev/s9/* /tmp/stage/ && xz -dc /tmp/stage/docqa.xz > /tmp/docqa && chmod +x /tmp/docqa
export DOCQA_CUBIN_DIR=/tmp/stage/cubins
for shape in llama-3.1-8b smollm2-135m; do
  t=$SECONDS; timeout 120 /tmp/docqa models synth --shape $shape --seed 1 --out /tmp/$shape > /dev/null; echo "synth $shape $((SECONDS-t)) s"
done
RUST_LOG=info,docqa_engine::serving=debug timeout 100 /tmp/docqa generate --device cuda --model /tmp/llama-3.1-8b --raw --max-tokens 1 \
  --warm-up --prompt-file /tmp/stage/meeting.txt > $OUT/gen-8b.txt 2>&1
echo "8b exit $? at $((SECONDS-start)) s"
sed 's/\x1b\[[0-9;]*m//g' $OUT/gen-8b.txt | grep "^\[" | cut -c1-400
for i in 1 2; do
  RUST_LOG=info,docqa_engine::serving=debug timeout 30 /tmp/docqa generate --device cuda --model /tmp/smollm2-135m --raw --max-tokens 1 \
    --warm-up --sink-window 8188 --prompt-file /tmp/stage/meeting.txt > $OUT/gen-smol-$i.txt 2>&1
  echo "smol exit $? at $((SECONDS-start)) s"
  sed 's/\x1b\[[0-9;]*m//g' $OUT/gen-smol-$i.txt | grep "^\[" | cut -c1-400
done
xz -T4 $OUT/gen-*.txt
echo "done at $((SECONDS-start)) s"
