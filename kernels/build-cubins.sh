#!/usr/bin/env bash
# Compiles every kernel module in kernels/cuda/ ahead of time to an sm_90a cubin with the pinned nvcc
# 13.0 (no GPU needed). Usage: kernels/build-cubins.sh OUT_DIR
# NVCC names the compiler; by default the one in .venv-cuda, which this script creates and fills from
# the pinned PyPI wheels when it is missing. A kernel that does not compile fails the script.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: $0 OUT_DIR}"
mkdir -p "$out"

if [[ -z "${NVCC:-}" ]]; then
    venv="$root/.venv-cuda"
    NVCC="$(ls "$venv"/lib/python3*/site-packages/nvidia/cu13/bin/nvcc 2>/dev/null | head -n1 || true)"
    if [[ -z "$NVCC" ]]; then
        python3 -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-nvrtc==13.0.88 \
            nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88 nvidia-cuda-cccl==13.0.85
        NVCC="$(ls "$venv"/lib/python3*/site-packages/nvidia/cu13/bin/nvcc | head -n1)"
    fi
fi
# The wheel's nvcc finds cicc and libdevice through the nvvm folder beside it.
export PATH="$(dirname "$NVCC"):$(dirname "$NVCC")/../nvvm/bin:$PATH"

# One module a core at a time (nvcc compiles a module on one thread); any module that fails, fails the script.
build_one() {
    local name
    name="$(basename "$1" .cu)"
    "$NVCC" -cubin -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Werror all-warnings \
        -Xptxas -warn-spills -o "$out/$name.sm_90a.cubin" "$1" || return 1
    echo "$name.sm_90a.cubin"
}
export -f build_one
export NVCC out
printf '%s\0' "$root"/kernels/cuda/*.cu | xargs -0 -n 1 -P "$(nproc)" bash -c 'build_one "$1"' _
