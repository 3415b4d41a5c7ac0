#!/usr/bin/env bash
# Kernel variants side by side in one run on the GPU machine: the skinny decode products at real widths and
# decode end to end (`DOCQA_BENCH_DECODE=products gpu-check`), and decode at real shapes, with each folder of
# cubins in turn (loaded through DOCQA_CUBIN_DIR by the same gpu-check), ROUNDS times, so that the clocks'
# drift over the run falls on every variant alike. A variant is the kernels built another way: another
# source of one module (`git show REV:kernels/cuda/gemv.cu`) or other macros (-DGEMV_ONE_PASS=0), compiled
# as kernels/build-cubins.sh compiles, beside the other modules' cubins.
#
# Usage: bench/cubin_variants.sh OUT NAME=CUBIN_DIR [NAME=CUBIN_DIR...]
# Environment: GPU_CHECK (default target/release/gpu-check), SHAPES (real shapes for decode, default
# llama-3.1-8b; empty for none), CASES (their batch x context cases, default 1x512), MODELS (where gpu-check
# writes or finds those checkpoints, default /tmp/gpu-record-models/bench), ROUNDS (default 2).
# Output: OUT/products-NAME-ROUND.txt, OUT/decode-NAME-ROUND.txt, and OUT/summary.txt: each product's µs and
# each decode case's ms a step, a column a variant and round.
set -uo pipefail
out=${1:?usage: bench/cubin_variants.sh OUT NAME=CUBIN_DIR [NAME=CUBIN_DIR...]}
shift
[ $# -ge 1 ] || { echo "name at least one NAME=CUBIN_DIR" >&2; exit 2; }
gpu_check=${GPU_CHECK:-target/release/gpu-check}
shapes=${SHAPES-llama-3.1-8b}
mkdir -p "$out"
columns=()
for round in $(seq 1 "${ROUNDS:-2}"); do
    for variant in "$@"; do
        name=${variant%%=*} dir=${variant#*=}
        [ -d "$dir" ] || { echo "$dir: no such folder of cubins" >&2; exit 2; }
        start=$SECONDS
        DOCQA_CUBIN_DIR=$dir DOCQA_BENCH_DECODE=products "$gpu_check" > "$out/products-$name-$round.txt" 2>&1
        echo "products $name round $round: exit $?, $((SECONDS - start)) s"
        if [ -n "$shapes" ]; then
            start=$SECONDS
            DOCQA_CUBIN_DIR=$dir DOCQA_BENCH_MODEL_DIR=${MODELS:-/tmp/gpu-record-models/bench} \
                DOCQA_BENCH_SHAPES=$shapes DOCQA_BENCH_CASES=${CASES:-1x512} "$gpu_check" \
                > "$out/decode-$name-$round.txt" 2>&1
            echo "decode $name round $round: exit $?, $((SECONDS - start)) s"
        fi
        columns+=("$name-$round")
    done
done
# One row a product or decode case (the persistent step's rows left out), one column a variant and round.
python3 - "$out" "${columns[@]}" <<'PY' | tee "$out/summary.txt"
import re, sys
from pathlib import Path
out, columns = Path(sys.argv[1]), sys.argv[2:]
rows, cells = [], {}
patterns = (("us", r"^\s+(\S+\s+.+?)\s+\d+ KB\s+([\d.]+) us"),
            ("ms", r"^\s+decode (batch .+?), graphs on\s+pdl on\s+persistent off\s+(splits \S+).*?([\d.]+) ms/step"))
for column in columns:
    for kind in ("products", "decode"):
        path = out / f"{kind}-{column}.txt"
        shape = ""
        for line in (path.read_text(errors="replace") if path.exists() else "").splitlines():
            if m := re.match(r"bench: (?:decode at the (\S+) shape|end to end, random (\S+)-shaped)", line):
                shape = (m.group(1) or m.group(2)) + " "
            for unit, pattern in patterns:
                if m := re.match(pattern, line):
                    label = m.group(1) if unit == "us" else f"{shape}{m.group(1)}, {m.group(2)}"
                    row = f"{unit}  " + " ".join(label.split())
                    if row not in rows:
                        rows.append(row)
                    cells[(row, column)] = m.group(m.lastindex)
width = max(map(len, rows), default=10)
print(" " * width, *(f"{c:>12}" for c in columns))
for row in rows:
    print(f"{row:<{width}}", *(f"{cells.get((row, c), '-'):>12}" for c in columns))
PY
