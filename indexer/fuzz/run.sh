#!/usr/bin/env bash
# Fuzzes docqa's parsers: `indexer/fuzz/run.sh SECONDS [TARGET...]` seeds the corpora (seed.sh),
# builds the fuzz targets with cargo-fuzz on the nightly toolchain (both installed when missing), then
# runs each target (pdf, docx, html, markdown, text; all by default) for SECONDS, one after another,
# with a 2 GiB RSS ceiling and a 10 s per-input timeout. Prints per target the executions, the
# corpus size and the outcome, and exits non-zero when any target found a crash, a timeout or an
# out-of-memory input; the input is saved under indexer/fuzz/artifacts/<target>/ and
# `cargo +nightly fuzz run --fuzz-dir indexer/fuzz -s none TARGET ARTIFACT` replays it.
#
# Built without a sanitizer (`-s none`): the parsers and their libraries are safe Rust, the findings
# sought are panics, hangs and unbounded memory, and AddressSanitizer would halve the executions.
# FUZZ_PROFILE=dev builds without optimisation (a cold build of minutes instead of a quarter of an
# hour on two cores, at a fraction of the executions per second): CI's short smoke run uses it;
# the default, release, is for long runs.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds="${1:?usage: indexer/fuzz/run.sh SECONDS [TARGET...]}"
shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(pdf docx html markdown text)
fuzz_dir=indexer/fuzz

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

"$fuzz_dir/seed.sh"
started=$(date +%s)
profile=()
[ "${FUZZ_PROFILE:-release}" = dev ] && profile=(--dev)
cargo +nightly fuzz build --fuzz-dir "$fuzz_dir" -s none "${profile[@]}"
echo "fuzz targets built in $(($(date +%s) - started)) s"

failed=0
summary=()
for target in "${targets[@]}"; do
    corpus="$fuzz_dir/corpus/$target"
    artifacts="$fuzz_dir/artifacts/$target"
    log="$fuzz_dir/artifacts/$target.log"
    mkdir -p "$corpus" "$artifacts"
    before=$(find "$corpus" -type f | wc -l)
    set +e
    cargo +nightly fuzz run --fuzz-dir "$fuzz_dir" -s none "${profile[@]}" "$target" "$corpus" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
        -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1
    rc=$?
    set -e
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
    after=$(find "$corpus" -type f | wc -l)
    found=$(find "$artifacts" -type f -newer "$log" -o -type f -cnewer "$log" 2>/dev/null | sort -u | head -n3 | tr '\n' ' ')
    if [ "$rc" -eq 0 ]; then
        outcome="ok"
    else
        failed=1
        kind=$(grep -oE 'deadly signal|ERROR: libFuzzer: (timeout|out-of-memory[^ ]*)|panic got out|promises|docqa parser fuzzing: .*' "$log" | head -n1)
        outcome="FAILED (exit $rc: ${kind:-see $log}; input ${found:-in $artifacts})"
        echo "---- $target: last lines of $log"
        tail -n 30 "$log"
    fi
    line=$(printf '%-9s %10s executions in %s s, corpus %d -> %d inputs: %s' \
        "$target" "${execs:-?}" "$seconds" "$before" "$after" "$outcome")
    echo "$line"
    summary+=("$line")
done

echo "== parser fuzzing, $seconds s per target"
printf '%s\n' "${summary[@]}"
exit "$failed"
