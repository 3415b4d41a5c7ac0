#!/usr/bin/env bash
# Real-scale timings on one GPU (BENCHMARKS.md, "Real scale"): a random checkpoint at a published model's
# shape (`docqa models synth`), docqa's engine on it through `docqa generate` (the serving engine's
# chunked prefill, paged KV sized from the GPU's memory, CUDA graphs in decode), and the anchors measured
# in the same run: HF transformers on the same weights and the GPU's copy bandwidth (bench/hf_real_scale.py).
#
# Usage: bench/real_scale.sh SHAPE LENGTHS OUT_DIR
#   SHAPE    a `docqa models synth` shape (llama-3.1-8b, qwen2.5-7b, ...)
#   LENGTHS  prompt lengths in tokens, comma-separated (the synthetic tokenizer makes one token per byte)
# Environment: DOCQA (the docqa binary, built with --features cuda), DOCQA_CUBIN_DIR (prebuilt kernels),
# MODELS (where checkpoints go, default /tmp/real-scale), HF_LENGTHS (prefill lengths for HF, default 8192,32768),
# CHUNKS (prompt tokens a step to time, default "512 8192"), HF_LENGTHS=none to leave HF out.
set -euo pipefail
shape=$1 lengths=$2 out=$3
docqa=${DOCQA:-docqa}
models=${MODELS:-/tmp/real-scale}
dir=$models/$shape
mkdir -p "$out" "$models"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"

if [ ! -f "$dir/config.json" ]; then
    start=$(date +%s)
    "$docqa" models synth --shape "$shape" --out "$dir" --seed 1 > /dev/null
    echo "synthesized $shape in $(( $(date +%s) - start )) s"
fi
du -sh "$dir"

# One prompt of random lowercase letters per length; each run reads a prompt of that length once to
# warm up (as HF's timings do), then asks it twice (the second time its KV comes from the prefix
# cache) and decodes 129 tokens.
IFS=, read -ra ns <<< "$lengths"
for n in "${ns[@]}"; do
    python3 -c "import random,string; random.seed($n); print(''.join(random.choices(string.ascii_lowercase + ' ', k=$n - 1)), end='')" > "$models/prompt-$n.txt"
    for chunk in ${CHUNKS:-512 8192}; do
        log="$out/docqa-$shape-$n-chunk$chunk.log"
        "$docqa" generate --device cuda --raw --model "$dir" --adapter none --prompt-file "$models/prompt-$n.txt" \
            --max-tokens 129 --repeat 2 --warm-up --prefill-chunk "$chunk" > /dev/null 2> "$log" || true
        echo "docqa $shape $n tokens, chunk $chunk:"; grep -E "^\[" "$log" || tail -3 "$log"
    done
done

[ "${HF_LENGTHS:-}" = none ] && exit 0
python3 bench/hf_real_scale.py "$dir" --lengths "${HF_LENGTHS:-8192,32768}" --json "$out/hf-$shape.json" 2>&1 \
    | grep -v "Loading weights" | tee "$out/hf-$shape.log"
