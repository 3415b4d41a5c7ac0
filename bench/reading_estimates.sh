#!/usr/bin/env bash
# The engine's reading-time estimates against the reads' times, on random checkpoints: `docqa generate` asks
# prompts of 1,500, 45, 816, 282 and 7,000 tokens in turn (and 30,000 at the Llama-3.2-1B shape), each
# report giving its first token beside the estimate the engine made before reading it. Runs each shape
# without and with `--warm-up`, the engine's step log at debug level in each log (the steps' own times).
#
#   bench/reading_estimates.sh DOCQA OUT [SHAPE...]     (default shapes: smollm2-135m llama-3.2-1b)
#
# DOCQA is a docqa binary; DEVICE (default cuda) is where it runs; MODELS (default /tmp/reading-estimates)
# holds the checkpoints `docqa models synth` writes (byte-level tokenizer: a character a token).
set -u
docqa=${1:?usage: $0 DOCQA OUT [SHAPE...]}
out=${2:?out dir}
shift 2
shapes=${*:-smollm2-135m llama-3.2-1b}
device=${DEVICE:-cuda}
models=${MODELS:-/tmp/reading-estimates}
mkdir -p "$out" "$models"
for n in 1500 45 816 282 7000 30000; do
    python3 -c "import random,string; random.seed($n); print(''.join(random.choices(string.ascii_lowercase + ' ', k=$n - 1)), end='')" \
        > "$models/prompt-$n.txt"
done
for shape in $shapes; do
    [ -f "$models/$shape/config.json" ] || "$docqa" models synth --shape "$shape" --seed 1 --out "$models/$shape" > /dev/null
    prompts=()
    for n in 1500 45 816 282 7000; do prompts+=(--prompt-file "$models/prompt-$n.txt"); done
    # 30,000 tokens only where the context holds them (SmolLM2's is 8,192).
    [ "$shape" = smollm2-135m ] || prompts+=(--prompt-file "$models/prompt-30000.txt")
    for warm in "" --warm-up; do
        log="$out/$shape${warm:+-warm-up}.txt"
        RUST_LOG=docqa_engine::serving=debug "$docqa" generate --device "$device" --raw --model "$models/$shape" \
            --adapter none --max-tokens 2 $warm "${prompts[@]}" > /dev/null 2> "$log"
        echo "== $shape ${warm:-(no warm-up)}: exit $?"
        grep -h "prompt tokens" "$log" | sed 's/^.*\[\([0-9]* prompt tokens\)/\1/; s/\[warm-up: /warm-up: /; s/ [0-9]* generated; load [0-9.]* s,//'
    done
done
