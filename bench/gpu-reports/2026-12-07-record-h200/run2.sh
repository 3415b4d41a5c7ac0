#!/usr/bin/env bash
# Call 2 (after go12.sh on the same machine): join the embedder, then docqa serve at the SmolLM2 shape with
# libtasn1's manual (a 72K-token sink-window long read): the defaults (the split policy, the calibration),
# then in one split. On an H200 with time left: the record's real part at the Qwen2.5-7B shape.
set -u
start=$SECONDS
left() { echo $((580 - (SECONDS-start))); }
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
[ -x /tmp/docqa ] && [ -d /tmp/smollm2-135m ] || { echo "not staged: run go12.sh first"; exit 1; }
cp STAGE2/emb.part.* /tmp/stage/ && cat /tmp/stage/emb.part.* | xz -dc | tar xf - -C /tmp/stage || exit 1
mkdir -p /tmp/models && mv /tmp/stage/all-minilm-l6-v2 /tmp/models/ 2>/dev/null
export DOCQA_CUBIN_DIR=/tmp/stage/cubins
for run in default:0 one-split:1; do
  IFS=: read -r label splits <<< "$run"
  DOCQA_CUDA_WINDOWED_SPLITS=$splits RUST_LOG=info,docqa_engine::serving=debug MODEL=/tmp/smollm2-135m MAX_TOKENS=32 \
    timeout 100 bash bench/serve_user_check.sh /tmp/docqa /tmp/models /tmp/stage/libtasn1.pdf $OUT/smol-$label > $OUT/serve-smol-$label.txt 2>&1
  echo "smol $label exit $? at $((SECONDS-start)) s"
  sed 's/\x1b\[[0-9;]*m//g' $OUT/smol-$label/serve-log.txt | grep -E "calibrated|warmed up|KV cache holds" | cut -c1-200
  sed 's/\x1b\[[0-9;]*m//g' $OUT/serve-smol-$label.txt | grep -oE "^== .*|work to do: [^']*|first_token_ms': [0-9]+" | cut -c1-160
  xz -T4 $OUT/smol-$label/serve-log.txt
done
case "$name" in
  *H200*)
    if [ $(left) -gt 200 ]; then
      REAL_SHAPE=qwen2.5-7b REAL_LENGTHS=8192,32000 GPU_CHECK=/tmp/gpu-check DOCQA=/tmp/docqa \
        timeout $(( $(left) - 15 )) bash bench/gpu_record.sh /tmp/o/record-qwen real
      echo "qwen real done at $((SECONDS-start)) s"
      (cd /tmp/o && tar cJf $OUT/record-qwen.tar.xz record-qwen); cat /tmp/o/record-qwen/summary.md | tail -6
    fi ;;
esac
echo "call 2 done at $((SECONDS-start)) s"
