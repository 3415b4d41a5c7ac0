#!/usr/bin/env bash
# The reader's training, end to end on a machine with an NVIDIA GPU and PyTorch (see training/README.md):
# training examples from the normalised training data (training/data), then LoRA on the base model.
#
#   training/run.sh MODEL_DIR NORMALISED_DIR OUT_DIR [train.py options...]
#
# MODEL_DIR is the base model as docqa serves it (`docqa models fetch` puts it in
# ~/.cache/docqa/models/smollm2-135m-instruct). OUT_DIR receives examples.jsonl.gz, the counts of the
# mixture (examples.txt) and the adapter (adapter/, PEFT layout, with training.json).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
model=${1:?usage: $0 MODEL_DIR NORMALISED_DIR OUT_DIR [train.py options...]}
data=${2:?normalised training data}
out=${3:?output directory}
shift 3
mkdir -p "$out"
python3 "$here/pipeline/examples.py" --normalised "$data" --model-dir "$model" \
    --out "$out/examples.jsonl.gz" --workers "$(nproc)" | tee "$out/examples.txt"
python3 "$here/pipeline/train.py" --model-dir "$model" --examples "$out/examples.jsonl.gz" \
    --out "$out/adapter" "$@"
