#!/usr/bin/env bash
# Fetch llama.cpp's tokenizer test vocabularies: real models' vocabularies as vocabulary-only GGUFs, each with
# test texts (`.inp`) and the ids the model's own Hugging Face tokenizer gives them (`.out`).
#
# What: the llama-cpp-python sdist (the version build_llama_cpp.sh pins) vendors llama.cpp, whose models/
# folder holds ggml-vocab-<name>.gguf{,.inp,.out}. This copies those of llama-spm (Llama 2's SentencePiece
# vocabulary), llama-bpe (Llama 3's byte-level BPE) and qwen2 (Qwen2's) into .cache/llama-vocabs/ and
# prints that folder. engine/tests/gguf_real_vocabs.rs converts each with docqa and checks its ids.
# Needs: python3 with pip (network access to the package index) on first use; idempotent.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
SRC_PARENT="$ROOT/.cache/llama-cpp-src"
OUT="$ROOT/.cache/llama-vocabs"
NAMES=(llama-spm llama-bpe qwen2)

wanted() {
  for name in "${NAMES[@]}"; do for ext in "" .inp .out; do echo "ggml-vocab-$name.gguf$ext"; done; done
}
if [[ -d "$OUT" ]] && wanted | (cd "$OUT" && xargs ls >/dev/null 2>&1); then
  echo "$OUT"
  exit 0
fi
mkdir -p "$OUT" "$SRC_PARENT"
MODELS="$SRC_PARENT/llama_cpp_python-$VERSION/vendor/llama.cpp/models"
if [[ ! -d "$MODELS" ]]; then
  TARBALL="$SRC_PARENT/llama_cpp_python-$VERSION.tar.gz"
  [[ -f "$TARBALL" ]] || python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python \
    -d "$SRC_PARENT" "llama-cpp-python==$VERSION" >&2
  MODELS="$(mktemp -d)/llama_cpp_python-$VERSION/vendor/llama.cpp/models"
  wanted | sed "s|^|llama_cpp_python-$VERSION/vendor/llama.cpp/models/|" |
    xargs tar -xzf "$TARBALL" -C "${MODELS%/llama_cpp_python-*}"
fi
wanted | while read -r file; do cp "$MODELS/$file" "$OUT/$file"; done
echo "$OUT"
