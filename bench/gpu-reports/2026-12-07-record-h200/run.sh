#!/usr/bin/env bash
# Call 1: stage docqa, gpu-check, the cubins and the embedder's first part; the SmolLM2 shape's checkpoint for
# call 2 (docqa serve). On an H200: the record (docqa, anchors, then the real 8B part).
set -u
start=$SECONDS
left() { echo $((580 - (SECONDS-start))); }
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $OUT/gpu-name.txt
mkdir -p /tmp/stage /tmp/o && cp -r STAGE/* /tmp/stage/ && cd /tmp/stage || exit 1
xz -dc docqa.xz > /tmp/docqa && xz -dc gpu-check.xz > /tmp/gpu-check && chmod +x /tmp/docqa /tmp/gpu-check && rm docqa.xz gpu-check.xz
cd - > /dev/null
export DOCQA_CUBIN_DIR=/tmp/stage/cubins
t=$SECONDS; timeout 100 /tmp/docqa models synth --shape smollm2-135m --seed 1 --out /tmp/smollm2-135m > /dev/null; echo "synth smol $((SECONDS-t)) s"
pack() { (cd /tmp/o && tar cJf $OUT/record.tar.xz .); cp /tmp/o/record/summary.md $OUT/ 2>/dev/null; }
case "$name" in
  *H200*)
    GPU_CHECK=/tmp/gpu-check DOCQA=/tmp/docqa timeout 300 bash bench/gpu_record.sh /tmp/o/record docqa anchors
    echo "record done at $((SECONDS-start)) s"; pack
    if [ $(left) -gt 120 ]; then
      GPU_CHECK=/tmp/gpu-check DOCQA=/tmp/docqa timeout $(( $(left) - 15 )) bash bench/gpu_record.sh /tmp/o/record real
      echo "real done at $((SECONDS-start)) s"; pack
    fi
    cat $OUT/summary.md 2>/dev/null | tail -20 ;;
esac
echo "call 1 done at $((SECONDS-start)) s"
