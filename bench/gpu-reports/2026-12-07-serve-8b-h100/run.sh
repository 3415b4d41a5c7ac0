#!/usr/bin/env bash
# Call 1: stage the binaries and the embedder's first part; on an H200 the record (docqa, anchors, real) first;
# then the random checkpoints the serve sessions of call 2 use.
set -u
start=$SECONDS
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $OUT/gpu-name.txt
mkdir -p /tmp/stage /tmp/o && cp -r .dev/s1/* /tmp/stage/ && cd /tmp/stage || exit 1
xz -dc docqa.xz > /tmp/docqa && xz -dc gpu-check.xz > /tmp/gpu-check && chmod +x /tmp/docqa /tmp/gpu-check && rm docqa.xz gpu-check.xz
cd - > /dev/null
export DOCQA_CUBIN_DIR=/tmp/stage/cubins
pack() { (cd /tmp/o && tar cJf $OUT/logs.tar.xz .); }
case "$name" in
  *H200*)
    GPU_CHECK=/tmp/gpu-check DOCQA=/tmp/docqa timeout 280 bash bench/gpu_record.sh /tmp/o/record docqa anchors
    echo "record done at $((SECONDS-start)) s"; pack; cp /tmp/o/record/summary.md $OUT/ 2>/dev/null
    GPU_CHECK=/tmp/gpu-check DOCQA=/tmp/docqa timeout 200 bash bench/gpu_record.sh /tmp/o/record real
    echo "real done at $((SECONDS-start)) s"; pack; cp /tmp/o/record/summary.md $OUT/ 2>/dev/null ;;
esac
for shape in llama-3.1-8b; do
  t=$SECONDS; [ -f /tmp/$shape/config.json ] || timeout $((590 - (SECONDS-start))) /tmp/docqa models synth --shape $shape --seed 1 --out /tmp/$shape > /dev/null
  echo "synth $shape $((SECONDS - t)) s, exit $?"
done
ls /tmp/stage; df -h /tmp | tail -1
echo "call 1 done at $((SECONDS-start)) s"
#!/usr/bin/env bash
# Call 2: join the embedder, then docqa serve at the Llama-3.1-8B shape with the engine's and the service's debug logs,
# with write-through (the default) and without: where the long path's second question spends its time.
set -u
cp .dev/s2/emb.part.* /tmp/stage/ && cat /tmp/stage/emb.part.* | xz -dc | tar xf - -C /tmp/stage || exit 1
mkdir -p /tmp/models && mv /tmp/stage/all-minilm-l6-v2 /tmp/models/ 2>/dev/null
export DOCQA_CUBIN_DIR=/tmp/stage/cubins
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for wt in true; do
  DOCQA_KV_WRITE_THROUGH=$wt RUST_LOG=info,docqa_engine::serving=debug MODEL=/tmp/llama-3.1-8b MAX_TOKENS=8 \
    QUESTION="What did the Prime Minister say about students?" \
    NEXT_QUESTION="What did the Minister of Seniors say about pandemic assistance for seniors?" \
    timeout 250 bash bench/serve_user_check.sh /tmp/docqa /tmp/models /tmp/stage/meeting.txt $OUT/8b-wt$wt > $OUT/serve-8b-wt$wt.txt 2>&1
  echo "wt=$wt exit $?"
  grep -E "^==|timings" $OUT/serve-8b-wt$wt.txt | cut -c1-200
  xz -T4 $OUT/8b-wt$wt/serve-log.txt
done
