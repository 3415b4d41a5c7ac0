#!/usr/bin/env bash
# Fuzzes docqa's parsers: `indexer/fuzz/run.sh SECONDS [TARGET...]` seeds the corpora (seed.sh),
# builds the fuzz targets with cargo-fuzz on the nightly toolchain (both installed when missing), then
# runs each target (pdf, docx, html, markdown, text; all by default) for SECONDS, as many at once as
# there are cores (FUZZ_JOBS overrides; each libFuzzer run is one thread), with a 2 GiB RSS ceiling and a 10 s per-input timeout. Prints per target the executions, the
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

# Runs one target for SECONDS; its summary line goes to the target's `.summary` file, and the
# exit status says whether it found nothing.
fuzz_target() {
    local target=$1
    local corpus="$fuzz_dir/corpus/$target"
    local artifacts="$fuzz_dir/artifacts/$target"
    local log="$fuzz_dir/artifacts/$target.log"
    mkdir -p "$corpus" "$artifacts"
    local before rc execs after found outcome kind
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
        kind=$(grep -oE 'deadly signal|ERROR: libFuzzer: (timeout|out-of-memory[^ ]*)|panic got out|promises|docqa parser fuzzing: .*' "$log" | head -n1 || true)
        outcome="FAILED (exit $rc: ${kind:-see $log}; input ${found:-in $artifacts})"
    fi
    printf '%-9s %10s executions in %s s, corpus %d -> %d inputs: %s\n' \
        "$target" "${execs:-?}" "$seconds" "$before" "$after" "$outcome" >"$artifacts.summary"
    [ "$rc" -eq 0 ]
}

jobs_at_once="${FUZZ_JOBS:-$(nproc)}"
for target in "${targets[@]}"; do rm -f "$fuzz_dir/artifacts/$target.summary"; done
running=0
for target in "${targets[@]}"; do
    if [ "$running" -ge "$jobs_at_once" ]; then
        wait -n || true
        running=$((running - 1))
    fi
    fuzz_target "$target" &
    running=$((running + 1))
done
wait

failed=0
summary=()
for target in "${targets[@]}"; do
    line=$(cat "$fuzz_dir/artifacts/$target.summary" 2>/dev/null ||
        echo "$target: FAILED (the run ended before its summary)")
    echo "$line"
    summary+=("$line")
    case "$line" in
    *": ok") ;;
    *)
        failed=1
        echo "---- $target: last lines of $fuzz_dir/artifacts/$target.log"
        tail -n 30 "$fuzz_dir/artifacts/$target.log"
        ;;
    esac
done

echo "== parser fuzzing, $seconds s per target"
printf '%s\n' "${summary[@]}"
exit "$failed"
