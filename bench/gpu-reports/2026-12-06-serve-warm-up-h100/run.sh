#!/usr/bin/env bash
# Second call: join the embedder, then docqa serve as a user on the GPU, at two shapes.
set -u
cp .dev/c/* .dev/e2/* /tmp/stage/ && cat /tmp/stage/embpart.* | xz -dc | tar xf - -C /tmp/stage || exit 1
mkdir -p /tmp/models && mv /tmp/stage/all-minilm-l6-v2 /tmp/models/ 2>/dev/null
xz -dc /tmp/stage/docqa.xz > /tmp/docqa && chmod +x /tmp/docqa
export DOCQA_CUBIN_DIR=/tmp/stage/cubins
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for shape in llama-3.1-8b smollm2-135m; do
  t=$SECONDS; [ -f /tmp/$shape/config.json ] || /tmp/docqa models synth --shape $shape --seed 1 --out /tmp/$shape > /dev/null; echo "synth $shape $((SECONDS - t)) s"
done
MODEL=/tmp/llama-3.1-8b MAX_TOKENS=8 bash bench/serve_user_check.sh /tmp/docqa /tmp/models /tmp/stage/meeting.txt $OUT/8b > $OUT/serve-8b.txt 2>&1
MODEL=/tmp/smollm2-135m bash bench/serve_user_check.sh /tmp/docqa /tmp/models /tmp/stage/libtasn1.pdf $OUT/smollm2 > $OUT/serve-smollm2.txt 2>&1
grep -h -E "warmed|loaded|first_token|work to do" $OUT/*/serve-log.txt $OUT/serve-*.txt | cut -c1-300
