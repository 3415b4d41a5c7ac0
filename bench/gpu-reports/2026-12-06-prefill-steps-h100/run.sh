#!/usr/bin/env bash
# Per-step prefill timings on the GPU: docqa generate with the engine's step log, at two shapes.
set -uo pipefail
B=$PWD/.dev/b
xz -dc $B/docqa.xz > /tmp/docqa && chmod +x /tmp/docqa
export DOCQA_CUBIN_DIR=$B/cubins
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for n in 2000 8000 32000 120000; do
  python3 -c "import random,string; random.seed($n); print(''.join(random.choices(string.ascii_lowercase + ' ', k=$n - 1)), end='')" > /tmp/p$n.txt
done
run() { # name model prompt extra...
  local name=$1 model=$2 p=$3; shift 3
  RUST_LOG=docqa_engine::serving=debug /tmp/docqa generate --device cuda --raw --model $model --adapter none \
    --prompt-file /tmp/p$p.txt --max-tokens 8 "$@" > /dev/null 2> $OUT/$name.log
  echo "$name rc=$?: $(grep -E '^\[' $OUT/$name.log | tr '\n' ' ')"
}
for shape in llama-3.1-8b smollm2-135m; do
  t=$(date +%s); /tmp/docqa models synth --shape $shape --seed 1 --out /tmp/$shape > /dev/null; echo "synth $shape $(( $(date +%s) - t )) s"
done
M=/tmp/llama-3.1-8b S=/tmp/smollm2-135m
run 8b-cold-2k $M 2000
run 8b-warm-2k $M 2000 --warm-up --repeat 2
run 8b-cold-120k $M 120000
run 8b-8k-chunk512 $M 8000 --warm-up --prefill-chunk 512
run 8b-8k-chunk8192 $M 8000 --warm-up --prefill-chunk 8192
run 8b-32k $M 32000 --warm-up
run s-cold-2k $S 2000
run s-warm-2k $S 2000 --warm-up --repeat 2
run s-8k $S 8000 --warm-up
run s-8k-chunk512 $S 8000 --warm-up --prefill-chunk 512
run s-8k-chunk8192 $S 8000 --warm-up --prefill-chunk 8192
