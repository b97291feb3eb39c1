#!/usr/bin/env bash
# One full run on the GPU machine: build, CUDA tests, compute-sanitizer, benchmarks.
# Results (logs, JSON) go to ${OUT:-gpu-results}; a short summary is printed last.
# Usage (from the repo root on the GPU machine): tools/gpu_check.sh [ctest -R filter]
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-results}"
mkdir -p "$out"
build=build-gpu
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  nvcc --version | tail -2
  dpkg -l | grep -E "libprotobuf-dev|libspdlog-dev|libfmt-dev|libeigen3-dev|nlohmann|cli11" | awk '{print $2, $3}'
} > "$out/machine.txt" 2>&1

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release > "$out/configure.log" 2>&1 &&
  cmake --build "$build" -j "$(nproc)" > "$out/build.log" 2>&1
build_rc=$?
echo "build rc=$build_rc" | tee "$out/summary.txt"
if [ $build_rc -ne 0 ]; then tail -40 "$out/build.log"; exit 1; fi

filter=()
if [ $# -gt 0 ]; then filter=(-R "$1"); fi
ctest --test-dir "$build" -L cuda --output-on-failure "${filter[@]}" > "$out/ctest-cuda.log" 2>&1
echo "ctest -L cuda rc=$? ($(grep -E 'tests passed|tests failed' "$out/ctest-cuda.log"))" | tee -a "$out/summary.txt"
ctest --test-dir "$build" -L "unit|e2e" -j 8 > "$out/ctest-cpu.log" 2>&1
echo "ctest -L unit|e2e rc=$? ($(grep -E 'tests passed|tests failed' "$out/ctest-cpu.log"))" | tee -a "$out/summary.txt"

if command -v compute-sanitizer > /dev/null; then
  for tool in memcheck racecheck; do
    compute-sanitizer --tool "$tool" --error-exitcode 3 "$build/tests/mg_cuda_tests" \
      > "$out/sanitizer-$tool.log" 2>&1
    echo "compute-sanitizer $tool rc=$? ($(grep -E 'ERROR SUMMARY' "$out/sanitizer-$tool.log" | tail -1))" | tee -a "$out/summary.txt"
  done
fi
cat "$out/summary.txt"
