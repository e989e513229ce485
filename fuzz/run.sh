#!/usr/bin/env bash
# Builds the fuzz targets and runs each for SECONDS (default 12), from its
# committed seeds in fuzz/seeds/<target> plus what earlier runs found in
# fuzz/corpus/<target> (not committed). A crash, a failed property or a
# slow input stops the run non-zero; libFuzzer writes the input to
# fuzz/artifacts/<target>/. Each target ends with libFuzzer's final
# statistics (executions, coverage, corpus).
#
#   bash fuzz/run.sh              # every target, 12 s each (CI)
#   bash fuzz/run.sh 3600 jsonrpc # one target for an hour
#
# Needs cargo-fuzz (installed here, pinned, when absent). libFuzzer's
# instrumentation flags are unstable rustc options: RUSTC_BOOTSTRAP lets the
# stable toolchain accept them. No sanitizer: the crate forbids `unsafe`.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_FUZZ_VERSION=0.13.2
seconds="${1:-12}"
shift || true

if [ "$(cargo fuzz --version 2>/dev/null | awk '{print $2}')" != "$CARGO_FUZZ_VERSION" ]; then
    cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi
export RUSTC_BOOTSTRAP=1

cargo fuzz build --sanitizer none
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo fuzz list)
fi
mkdir -p fuzz/artifacts
for target in "${targets[@]}"; do
    echo "== fuzz target $target: ${seconds}s"
    mkdir -p "fuzz/corpus/$target"
    log="fuzz/artifacts/$target.log"
    if ! cargo fuzz run --sanitizer none "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
        -dict=fuzz/json.dict -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 \
        -print_final_stats=1 >"$log" 2>&1; then
        tail -n 60 "$log"
        echo "fuzz target $target failed (full log: $log)"
        exit 1
    fi
    grep -E '^(#[0-9]+.*DONE|Done |stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb))' "$log"
done
