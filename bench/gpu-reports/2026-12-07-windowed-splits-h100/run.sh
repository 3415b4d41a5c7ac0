#!/usr/bin/env bash
# One call: gpu-check's parity of the windowed prefill split form and its timings; on an H200 the
# record; then docqa generate with the calibrating warm-up: the SmolLM2 shape through an 8,188-token sink
# window (the 120K meeting, one split and the split policy) and the Llama-3.1-8B shape dense.
set -u
start=$SECONDS
left() { echo $((440 - (SECONDS-start))); }
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $OUT/gpu-name.txt
mkdir -p /tmp/stage /tmp/o && cp -r .dev/s8/* /tmp/stage/ && cd /tmp/stage || exit 1
xz -dc docqa.xz > /tmp/docqa && xz -dc gpu-check.xz > /tmp/gpu-check && chmod +x /tmp/docqa /tmp/gpu-check && rm docqa.xz gpu-check.xz
cd - > /dev/null
export DOCQA_CUBIN_DIR=/tmp/stage/cubins
case "$name" in
  *H200*)
    GPU_CHECK=/tmp/gpu-check DOCQA=/tmp/docqa timeout $(( $(left) - 60 )) bash bench/gpu_record.sh /tmp/o/record docqa anchors
    echo "record done at $((SECONDS-start)) s"; (cd /tmp/o && tar cJf $OUT/record.tar.xz .); cp /tmp/o/record/summary.md $OUT/ 2>/dev/null
    grep -E "windowed|FAIL|passed" /tmp/o/record/*gpu-check* 2>/dev/null | tail -30 ;;
  *)
    timeout 150 /tmp/gpu-check --ops-only > $OUT/gpu-check-ops.txt 2>&1; echo "gpu-check ops exit $? at $((SECONDS-start)) s"
    grep -E "windowed|FAIL|passed" $OUT/gpu-check-ops.txt | tail -40
    DOCQA_BENCH_PREFILL=windowed timeout 90 /tmp/gpu-check > $OUT/bench-windowed.txt 2>&1; echo "bench exit $? at $((SECONDS-start)) s"
    tail -14 $OUT/bench-windowed.txt ;;
esac
t=$SECONDS; timeout $(left) /tmp/docqa models synth --shape smollm2-135m --seed 1 --out /tmp/smollm2-135m > /dev/null; echo "synth smol $((SECONDS-t)) s"
for splits in 1 0; do
  DOCQA_CUDA_WINDOWED_SPLITS=$splits RUST_LOG=info,docqa_engine::serving=debug timeout $(left) /tmp/docqa generate --device cuda --model /tmp/smollm2-135m --raw --max-tokens 1 \
    --warm-up --sink-window 8188 --prompt-file /tmp/stage/meeting.txt --repeat 1 > $OUT/gen-smol-splits$splits.txt 2>&1
  echo "smol splits=$splits exit $? at $((SECONDS-start)) s"
  sed 's/\x1b\[[0-9;]*m//g' $OUT/gen-smol-splits$splits.txt | grep "^\[" | cut -c1-400
  xz -T4 $OUT/gen-smol-splits$splits.txt
done
if [ $(left) -gt 150 ]; then
  t=$SECONDS; timeout $(left) /tmp/docqa models synth --shape llama-3.1-8b --seed 1 --out /tmp/llama-3.1-8b > /dev/null; echo "synth 8b $((SECONDS-t)) s"
  RUST_LOG=info,docqa_engine::serving=debug timeout $(left) /tmp/docqa generate --device cuda --model /tmp/llama-3.1-8b --raw --max-tokens 1 \
    --warm-up --prompt-file /tmp/stage/meeting.txt > $OUT/gen-8b.txt 2>&1
  echo "8b exit $? at $((SECONDS-start)) s"
  sed 's/\x1b\[[0-9;]*m//g' $OUT/gen-8b.txt | grep "^\[" | cut -c1-400
  xz -T4 $OUT/gen-8b.txt
fi
echo "done at $((SECONDS-start)) s"
