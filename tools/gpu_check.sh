#!/usr/bin/env bash
# One full run on the GPU machine, sized for one 10-minute `run` call: build, the CUDA tests,
# compute-sanitizer memcheck and racecheck on them (MG_GPU_CHECK_CPU=1: the CPU suites too).
# Logs go to ${OUT:-gpu-results}; a short summary is printed last.
# Usage (from the repo root on the GPU machine): tools/gpu_check.sh [ctest -R filter]
# Environment: MG_CUDA_ARCHS (default 90a-real: the H100/H200 only, to build fast),
#              MG_SANITIZE_DTYPES (default bf16: the dtypes the CUDA tests run under the sanitizers).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-results}"
mkdir -p "$out"
build=build-gpu
archs="${MG_CUDA_ARCHS:-90a-real}"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  nvcc --version | tail -2
  dpkg -l | grep -E "libprotobuf-dev|libspdlog-dev|libfmt-dev|libeigen3-dev|nlohmann|cli11|libgtest" | awk '{print $2, $3}'
} > "$out/machine.txt" 2>&1

start=$(date +%s)
stamp() { echo "$(( $(date +%s) - start ))s"; }
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMG_CUDA=ON \
  -DMG_CUDA_ARCHITECTURES="$archs" > "$out/configure.log" 2>&1 &&
  cmake --build "$build" -j "$(nproc)" > "$out/build.log" 2>&1
build_rc=$?
echo "build rc=$build_rc ($(stamp))" | tee "$out/summary.txt"
if [ $build_rc -ne 0 ]; then
  tail -30 "$out/configure.log"
  grep -E "error|Error" "$out/build.log" | head -40
  tail -20 "$out/build.log"
  exit 1
fi

filter=()
if [ $# -gt 0 ]; then filter=(-R "$1"); fi
timeout 150 ctest --test-dir "$build" -L cuda --output-on-failure -j 4 "${filter[@]}" \
  > "$out/ctest-cuda.log" 2>&1
echo "ctest -L cuda rc=$? ($(grep -E 'tests passed|tests failed' "$out/ctest-cuda.log")) ($(stamp))" | tee -a "$out/summary.txt"
grep -E "^\s+[0-9]+ - .*(Failed|Timeout|Exception)" "$out/ctest-cuda.log" | head -20 | tee -a "$out/summary.txt"
# The whole-model numbers (logits error per dtype, greedy agreement), printed by the tests.
"$build/tests/mg_cuda_tests" --gtest_filter='Models/*' 2>&1 | grep '^\[metric\]' | tee -a "$out/summary.txt"
# The command end to end on the bundled dense model (untuned numbers, for the record only).
for dtype in bf16 f32; do
  "$build/moegraph" run models/tiny-llama --device cuda --dtype "$dtype" --max-new-tokens 32 2>&1 |
    grep -E "model:|generated ids|prefill|decode|error" | sed "s/^/[run $dtype] /" | tee -a "$out/summary.txt"
done
if [ "${MG_GPU_CHECK_CPU:-0}" = 1 ]; then  # the CPU suites run on any machine; here on request
  timeout 120 ctest --test-dir "$build" -L "unit|e2e" -j "$(nproc)" > "$out/ctest-cpu.log" 2>&1
  echo "ctest -L unit|e2e rc=$? ($(grep -E 'tests passed|tests failed' "$out/ctest-cpu.log")) ($(stamp))" | tee -a "$out/summary.txt"
fi

if command -v compute-sanitizer > /dev/null; then
  export MG_TEST_DTYPES="${MG_SANITIZE_DTYPES:-bf16}"
  # memcheck: every test (ops, attention, whole models through Session) but the 2000-token
  # context, far too slow when every access is checked. racecheck: the tests of the kernels that
  # share memory between threads (rms_norm, rope, attention; embedding and add ride along). The
  # linear and gated MLP tests are left out: their only shared-memory kernels are cuBLAS's Hopper
  # GEMMs (nvjet_*), which order shared memory with mbarriers and the async proxy that racecheck
  # does not model; on 2026-11-22 it reported 8 hazards inside them (none elsewhere), and with
  # --kernel-name-exclude kns=nvjet the tool itself failed ("Internal Sanitizer Error").
  declare -A filters=(
    [memcheck]="*-CudaAttention.LongContext*"
    [racecheck]="CudaOps.Embedding*:CudaOps.RmsNorm*:CudaOps.Rope*:CudaOps.Add*:CudaAttention.PrefillMatchesReference:CudaAttention.Chunked*")
  declare -A limits=([memcheck]=130 [racecheck]=90)
  for tool in memcheck racecheck; do
    timeout "${limits[$tool]}" compute-sanitizer --tool "$tool" --error-exitcode 3 \
      "$build/tests/mg_cuda_tests" --gtest_filter="${filters[$tool]}" --gtest_brief=1 \
      > "$out/sanitizer-$tool.log" 2>&1
    rc=$?
    echo "compute-sanitizer $tool rc=$rc ($(grep -E '(ERROR|RACECHECK) SUMMARY' "$out/sanitizer-$tool.log" | tail -1); $(grep -E '^\[  (PASSED|FAILED)' "$out/sanitizer-$tool.log" | tr '\n' ' ')) ($(stamp))" | tee -a "$out/summary.txt"
  done
fi
echo "----"
cat "$out/summary.txt"
