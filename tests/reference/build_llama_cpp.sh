#!/usr/bin/env bash
# Build llama.cpp (CPU only, Release, native CPU features) as an independent reference for docqa.
#
# What: downloads the llama-cpp-python source distribution with pip, unpacks it, and builds its vendored
# `vendor/llama.cpp` with CMake + Ninja. Only the tools docqa's reference scripts and benchmarks use are
# built: llama-bench, llama-quantize, llama-tokenize, llama-simple (greedy-decoding spot check) and
# llama-gguf (metadata dump).
#
# Output: .cache/llama.cpp/bin/<tool>  (and .cache/llama.cpp/VERSION with the source version).
# Needs: python3 with pip (network access to the package index), a C/C++ compiler. cmake and ninja come
# from the venv .cache/venv (tests/reference/venv.sh) when they are not on PATH.
# Run:   tests/reference/build_llama_cpp.sh        (idempotent: does nothing when the tools exist)
# Env:   LLAMA_CPP_PYTHON_VERSION (default below), JOBS (default 2), FORCE=1 to rebuild.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="$ROOT/.cache"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
JOBS="${JOBS:-2}"
OUT="$CACHE/llama.cpp"
SRC_PARENT="$CACHE/llama-cpp-src"
TARGETS=(llama-bench llama-quantize llama-tokenize llama-simple llama-gguf)

if [[ -z "${FORCE:-}" && -f "$OUT/VERSION" && "$(cat "$OUT/VERSION")" == "$VERSION" ]]; then
  missing=0
  for t in "${TARGETS[@]}"; do [[ -x "$OUT/bin/$t" ]] || missing=1; done
  if [[ $missing == 0 ]]; then
    echo "llama.cpp (llama-cpp-python $VERSION) already built in $OUT/bin"
    exit 0
  fi
fi

# cmake and ninja: use the system ones, else the pinned ones of the venv under .cache/ (venv.sh).
if ! command -v cmake >/dev/null || ! command -v ninja >/dev/null; then
  PY="$("$ROOT/tests/reference/venv.sh")"
  export PATH="$(dirname "$PY"):$PATH"
fi

# Source: the llama-cpp-python sdist, which vendors a pinned llama.cpp.
mkdir -p "$SRC_PARENT"
SRC_DIR="$SRC_PARENT/llama_cpp_python-$VERSION"
if [[ ! -f "$SRC_DIR/vendor/llama.cpp/CMakeLists.txt" ]]; then
  python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python -d "$SRC_PARENT" "llama-cpp-python==$VERSION"
  tar -xzf "$SRC_PARENT/llama_cpp_python-$VERSION.tar.gz" -C "$SRC_PARENT"
fi
LLAMA_SRC="$SRC_DIR/vendor/llama.cpp"

BUILD="$CACHE/llama.cpp-build"
cmake -S "$LLAMA_SRC" -B "$BUILD" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_OPENMP=ON \
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON
cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"

mkdir -p "$OUT/bin"
for t in "${TARGETS[@]}"; do cp "$BUILD/bin/$t" "$OUT/bin/$t"; done
echo "$VERSION" > "$OUT/VERSION"
echo "built: $(ls "$OUT/bin" | tr '\n' ' ')"
