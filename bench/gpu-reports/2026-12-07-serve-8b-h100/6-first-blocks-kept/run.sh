#!/usr/bin/env bash
# The second of two calls (the first staged docqa, the cubins and the embedder's first part under
# /tmp/stage and wrote /tmp/llama-3.1-8b and /tmp/smollm2-135m with `docqa models synth --seed 1`):
# join the embedder, then docqa serve at the SmolLM2 shape with libtasn1's manual (a 72K-token sink-window
# long read) in one split, then at the Llama-3.1-8B shape with the 120K meeting: write-through with the
# default tiers (2 GiB host, 10 GiB disk: its 15.8 GB of KV do not fit), write-through with a 20 GiB disk
# (they fit), and without write-through.
set -u
start=$SECONDS
cp .dev/s2/emb.part.* /tmp/stage/ && cat /tmp/stage/emb.part.* | xz -dc | tar xf - -C /tmp/stage || exit 1
mkdir -p /tmp/models && mv /tmp/stage/all-minilm-l6-v2 /tmp/models/ 2>/dev/null
export DOCQA_CUBIN_DIR=/tmp/stage/cubins
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for splits in 1; do
  DOCQA_CUDA_WINDOWED_SPLITS=$splits RUST_LOG=info,docqa_engine::serving=debug MODEL=/tmp/smollm2-135m MAX_TOKENS=32 \
    timeout 100 bash bench/serve_user_check.sh /tmp/docqa /tmp/models /tmp/stage/libtasn1.pdf $OUT/smol-splits$splits > $OUT/serve-smol-splits$splits.txt 2>&1
  echo "smol splits=$splits exit $? at $((SECONDS-start)) s"
  grep -E "^==|timings" $OUT/serve-smol-splits$splits.txt | cut -c1-200
  xz -T4 $OUT/smol-splits$splits/serve-log.txt
done
for run in wt-disk10g:true:10240 wt-disk20g:true:20480 nowt:false:10240; do
  IFS=: read -r name wt disk <<< "$run"
  DOCQA_KV_WRITE_THROUGH=$wt DOCQA_KV_DISK_MIB=$disk RUST_LOG=info,docqa_engine::serving=debug MODEL=/tmp/llama-3.1-8b MAX_TOKENS=8 \
    QUESTION="What did the Prime Minister say about students?" \
    NEXT_QUESTION="What did the Minister of Seniors say about pandemic assistance for seniors?" \
    timeout 150 bash bench/serve_user_check.sh /tmp/docqa /tmp/models /tmp/stage/meeting.txt $OUT/8b-$name > $OUT/serve-8b-$name.txt 2>&1
  echo "$name exit $? at $((SECONDS-start)) s"
  grep -E "^==|timings" $OUT/serve-8b-$name.txt | cut -c1-200
  grep -m1 "KV tiers (host" $OUT/8b-$name/serve-log.txt | cut -c1-300
  xz -T4 $OUT/8b-$name/serve-log.txt
done
