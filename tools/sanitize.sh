#!/usr/bin/env bash
# Builds the CPU code with AddressSanitizer + UndefinedBehaviorSanitizer (any UBSan report is
# fatal) and runs the unit and e2e suites under them. A finding fails the run; the log names it.
# Usage: tools/sanitize.sh [ctest -R filter]
# Environment: MG_SANITIZE_BUILD_DIR (default build-sanitize), MG_JOBS (default nproc),
#              MG_SANITIZE_LABELS (default "unit|e2e").
# Takes about 25 minutes on 2 cores from a cold ccache; on 16 cores a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${MG_SANITIZE_BUILD_DIR:-build-sanitize}"
jobs="${MG_JOBS:-$(nproc)}"
labels="${MG_SANITIZE_LABELS:-unit|e2e}"

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMG_CUDA=OFF \
  -DMG_SANITIZE=address,undefined -DCMAKE_CXX_FLAGS="-fno-sanitize-recover=all"
cmake --build "$build" -j "$jobs" --target moegraph mg_unit_tests mg_e2e_tests

# detect_leaks: every test process must free what it allocated; allocator_may_return_null: a refused
# huge allocation is std::bad_alloc as in a normal build (the bad-input tests expect that error
# path), not an ASan abort; halt_on_error: the first report
# ends the test, so ctest counts it as failed.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=1:strict_string_checks=1:check_initialization_order=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
filter=()
if [ $# -gt 0 ]; then filter=(-R "$1"); fi
ctest --test-dir "$build" -L "$labels" --output-on-failure -j "$jobs" "${filter[@]}"
