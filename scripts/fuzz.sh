#!/usr/bin/env bash
# Fuzzes the input parsers and the comparator with cargo-fuzz (libFuzzer) for
# a fixed number of runs per target. Not part of scripts/test.sh or CI: run it
# by hand before a release or after touching a parser. A crash stops the run
# and leaves the input in fuzz/artifacts/<target>/; keep it as a regression
# test (see docs/fuzzing.md).
#
# Usage: scripts/fuzz.sh [RUNS] [TARGET...]
#   RUNS     libFuzzer -runs per target (default 200000)
#   TARGET   predict_input, policy_input, samples_input, comparator (default: all)
# Environment:
#   FUZZ_MAX_TIME    also stop each target after this many seconds (default 300)
#   CARGO_TARGET_DIR where to build (default fuzz/target)
#
# Works on the stable toolchain: `-s none` builds without a sanitizer, which
# needs no nightly flags. The code under test is safe Rust, so what we look
# for are panics (including integer overflow: fuzz builds keep overflow checks
# and debug assertions on), not memory errors.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '==> %s\n' "$*" >&2; }

runs="${1:-200000}"
shift || true
max_time="${FUZZ_MAX_TIME:-300}"
target_dir="${CARGO_TARGET_DIR:-$PWD/fuzz/target}"

if ! cargo fuzz --version >/dev/null 2>&1; then
    log "installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi

log "building fuzz targets (release, overflow checks on, no sanitizer)"
cargo fuzz build -s none --target-dir "$target_dir"

for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t"
    seeds=()
    if [ -d "fuzz/seeds/$t" ]; then seeds=("fuzz/seeds/$t"); fi
    log "fuzzing $t: $runs runs (at most ${max_time}s)"
    # new inputs go to the first directory (git-ignored); seeds are read only
    cargo fuzz run -s none --target-dir "$target_dir" "$t" "fuzz/corpus/$t" "${seeds[@]}" -- \
        -runs="$runs" -max_total_time="$max_time" -print_final_stats=1
done
log "no crash in ${targets[*]}"
