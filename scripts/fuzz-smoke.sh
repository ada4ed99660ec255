#!/usr/bin/env bash
# Fuzz smoke: builds the cargo-fuzz targets in fuzz/ and runs each one for
# ${ORB_FUZZ_SECONDS:-30} seconds, starting from the committed corpus in fuzz/corpus/<target>.
# Exits non-zero when a target fails to build or libFuzzer reports a crash, panic, leak or
# timeout (the reproducer is written to fuzz/artifacts/<target>/).
#
# The committed corpus is never modified: each run works in a scratch copy, so a smoke run
# leaves the tree clean. See docs/fuzzing.md for long runs and for adding what they find.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_PER_TARGET="${ORB_FUZZ_SECONDS:-30}"
TARGETS=(hostfactory_input template_file config_layers native_spec jinja_render)

# libFuzzer's instrumentation needs unstable rustc flags. The default stable toolchain
# accepts them with RUSTC_BOOTSTRAP=1, so no nightly toolchain is needed; without a
# sanitizer (Rust code here forbids `unsafe`), the build is several times faster than with
# AddressSanitizer, and panics, overflows (debug assertions stay on) and timeouts are still
# caught. The build directory is kept outside the repo so that later runs start warm.
export RUSTC_BOOTSTRAP=1
FUZZ_TARGET_DIR="${ORB_FUZZ_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/orb-rs/fuzz-target}"
FUZZ_FLAGS=(--sanitizer none --release --debug-assertions --target-dir "$FUZZ_TARGET_DIR")

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz smoke: installing cargo-fuzz 0.13.2"
    cargo install cargo-fuzz --locked --version 0.13.2
fi

cd "$ROOT"
echo "fuzz smoke: building ${#TARGETS[@]} targets (build dir $FUZZ_TARGET_DIR)"
cargo fuzz build "${FUZZ_FLAGS[@]}"
# scripts/test.sh builds the targets in the background while the workspace builds, and runs
# them once the tests are done.
if [[ ${1:-} == --build-only ]]; then
    echo "fuzz smoke: built"
    exit 0
fi

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

failed=()
for target in "${TARGETS[@]}"; do
    work="$scratch/$target"
    mkdir -p "$work" "fuzz/artifacts/$target"
    cp -r "fuzz/corpus/$target/." "$work/"
    log="$scratch/$target.log"
    echo "fuzz smoke: $target for ${SECONDS_PER_TARGET}s"
    if cargo fuzz run "${FUZZ_FLAGS[@]}" "$target" "$work" -- \
        -max_total_time="$SECONDS_PER_TARGET" \
        -rss_limit_mb=2048 \
        -timeout=20 \
        -dict="$ROOT/fuzz/dicts/$target.dict" \
        -print_final_stats=1 >"$log" 2>&1; then
        grep -E '^(Done|stat::number_of_executed_units)' "$log" | sed "s/^/  $target: /" || true
    else
        echo "fuzz smoke: $target FAILED; last lines of its log:"
        tail -n 40 "$log"
        failed+=("$target")
    fi
done

if ((${#failed[@]} > 0)); then
    echo "fuzz smoke: ${#failed[@]} target(s) failed: ${failed[*]} (reproducers in fuzz/artifacts/)"
    exit 1
fi
echo "fuzz smoke: all ${#TARGETS[@]} targets ran ${SECONDS_PER_TARGET}s without a crash"
