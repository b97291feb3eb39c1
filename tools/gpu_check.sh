#!/usr/bin/env bash
# One full run on the GPU machine, sized for one 10-minute `run` call: build, the CUDA tests,
# compute-sanitizer memcheck and racecheck on them (MG_GPU_CHECK_TESTS=0: skip all that;
# MG_GPU_CHECK_SANITIZE=0: skip only the sanitizers; MG_GPU_CHECK_CPU=1: the CPU suites too;
# MG_GPU_CHECK_SERVE=1: `bench serve` (batched generation at 1/8/32/128 sequences) on the
# Qwen3-30B-A3B-shaped model, and with MG_GPU_CHECK_HF=1 transformers' batched generate too;
# MG_GPU_CHECK_BENCH=1: then `moegraph bench moe` over the four reference shapes, JSON in $OUT
# (MG_GPU_CHECK_BENCH_MOE=0 skips it),
# and `bench e2e` on the bundled MoE model and a Qwen3-30B-A3B-shaped model of
# MG_GPU_CHECK_QWEN3_LAYERS layers, default 48 (the whole model: a graph-only make-model run with
# --random-weights, weights made on the GPU), with and without --cuda-graph and with the fuse-ops
# pass off (--no-fuse) beside on and with MG_PDL=0 (programmatic dependent launch off), then its
# step profile both ways; and `bench gemv` (linear's GEMV
# path against cuBLASLt on the decode step's projections). MG_GPU_CHECK_HF=1 also times
# transformers' generate on the same model (tools/bench/hf_generate_bench.py; needs torch and
# transformers on the machine).
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

# Machines without the tokenizer's -dev packages build against tools/stage_gpu_deps.sh's copies.
if [ -d build-deps/lib/pkgconfig ]; then
  export PKG_CONFIG_PATH="$PWD/build-deps/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
fi
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

if [ "${MG_GPU_CHECK_TESTS:-1}" = 1 ]; then
  filter=()
  if [ $# -gt 0 ]; then filter=(-R "$1"); fi
  timeout 240 ctest --test-dir "$build" -L cuda --output-on-failure -j 4 "${filter[@]}" \
    > "$out/ctest-cuda.log" 2>&1
  echo "ctest -L cuda rc=$? ($(grep -E 'tests passed|tests failed' "$out/ctest-cuda.log")) ($(stamp))" | tee -a "$out/summary.txt"
  grep -E "^\s+[0-9]+ - .*(Failed|Timeout|Exception)" "$out/ctest-cuda.log" | head -20 | tee -a "$out/summary.txt"
  # The whole-model numbers (logits error per dtype, greedy agreement), printed by the tests.
  "$build/tests/mg_cuda_tests" --gtest_filter='Models/*' 2>&1 | grep '^\[metric\]' | tee -a "$out/summary.txt"
  # The command end to end on the bundled models (untuned numbers, for the record only).
  for model in tiny-llama tiny-moe; do
    for flags in "--dtype bf16" "--dtype f32" "--dtype bf16 --cuda-graph"; do
      # shellcheck disable=SC2086
      "$build/moegraph" run "models/$model" --device cuda $flags --max-new-tokens 32 2>&1 |
        grep -E "model:|generated ids|prefill|decode|error" | sed "s/^/[run $model $flags] /" |
        tee -a "$out/summary.txt"
    done
  done
  if [ "${MG_GPU_CHECK_CPU:-0}" = 1 ]; then  # the CPU suites run on any machine; here on request
    timeout 120 ctest --test-dir "$build" -L "unit|e2e" -j "$(nproc)" > "$out/ctest-cpu.log" 2>&1
    echo "ctest -L unit|e2e rc=$? ($(grep -E 'tests passed|tests failed' "$out/ctest-cpu.log")) ($(stamp))" | tee -a "$out/summary.txt"
  fi

  if [ "${MG_GPU_CHECK_SANITIZE:-1}" = 1 ] && command -v compute-sanitizer > /dev/null; then
    export MG_TEST_DTYPES="${MG_SANITIZE_DTYPES:-bf16}"
    # memcheck: every test (ops, attention, whole models through Session) but the 2000-token
    # context, far too slow when every access is checked. racecheck: the tests of the kernels that
    # share memory between threads (rms_norm, rope, attention; embedding and add ride along). The
    # linear and gated MLP tests are left out: their only shared-memory kernels are cuBLAS's Hopper
    # GEMMs (nvjet_*), which order shared memory with mbarriers and the async proxy that racecheck
    # does not model; on 2026-11-22 it reported 8 hazards inside them (none elsewhere), and with
    # --kernel-name-exclude kns=nvjet the tool itself failed ("Internal Sanitizer Error").
    # The MoE kernels (routing, alignment, grouped GEMM, decode) share memory between threads too,
    # so racecheck covers their tests; the large-batch test (cuBLAS path, 2048-wide experts) is
    # left out of both, too slow when every access is checked. So is the PDL test that asserts
    # that two launches overlap (a consumer reading before its wait sees stale values): the
    # sanitizer runs kernels one after another.
    declare -A filters=(
      [memcheck]="*-CudaAttention.LongContext*:CudaMoE.FusedBackendTakesTheCublasPath*:CudaGroupedGemm.LargeTiles*:CudaPdl.AConsumerThatReadsBeforeWaiting*"
      [racecheck]="CudaOps.Embedding*:CudaOps.RmsNorm*:CudaOps.Rope*:CudaOps.Add*:CudaAttention.PrefillMatchesReference:CudaAttention.Chunked*:MoERoutingCuda.GroupedTopKByHand:MoEAlignCuda.*:CudaGroupedGemm.MatchesReference:DecodeExpertsCuda.HandCheckedTokens:DecodeExpertsCuda.MatchesReference:CudaMoE.SharedExperts*")
    declare -A limits=([memcheck]=200 [racecheck]=150)
    for tool in memcheck racecheck; do
      timeout "${limits[$tool]}" compute-sanitizer --tool "$tool" --error-exitcode 3 \
        "$build/tests/mg_cuda_tests" --gtest_filter="${filters[$tool]}" --gtest_brief=1 \
        > "$out/sanitizer-$tool.log" 2>&1
      rc=$?
      echo "compute-sanitizer $tool rc=$rc ($(grep -E '(ERROR|RACECHECK) SUMMARY' "$out/sanitizer-$tool.log" | tail -1); $(grep -E '^\[  (PASSED|FAILED)' "$out/sanitizer-$tool.log" | tr '\n' ' ')) ($(stamp))" | tee -a "$out/summary.txt"
    done
  fi
fi

if [ "${MG_GPU_CHECK_BENCH:-0}" = 1 ]; then
  unset MG_TEST_DTYPES
  if [ "${MG_GPU_CHECK_BENCH_MOE:-1}" = 1 ]; then
    timeout 240 "$build/moegraph" bench moe --json "$out/bench_moe.json" > "$out/bench_moe.txt" 2>&1
    echo "bench moe rc=$? ($(stamp))" | tee -a "$out/summary.txt"
  fi
  timeout 120 "$build/moegraph" bench gemv > "$out/bench_gemv.txt" 2>&1
  echo "bench gemv rc=$? ($(stamp))" | tee -a "$out/summary.txt"
  sed "s/^/[bench gemv] /" "$out/bench_gemv.txt" | tee -a "$out/summary.txt"
  for flags in "" "--cuda-graph"; do
    # shellcheck disable=SC2086
    "$build/moegraph" bench e2e models/tiny-moe --prompt-tokens 256 --decode-tokens 64 $flags 2>&1 |
      sed "s/^/[bench e2e tiny-moe $flags] /" | tee -a "$out/summary.txt"
  done
  qwen3="$build/qwen3-30b-a3b-shaped"
  layers="${MG_GPU_CHECK_QWEN3_LAYERS:-48}"
  timeout 120 "$build/moegraph" make-model --family qwen3_moe --out "$qwen3" --layers "$layers" \
    --hidden 2048 --heads 32 --kv-heads 4 --head-dim 128 --experts 128 --topk 8 --moe-inter 768 \
    --vocab 151936 --max-seq-len 2048 --graph-only > "$out/make_qwen3.txt" 2>&1
  echo "make-model qwen3-30b-a3b-shaped ($layers layers, graph only) rc=$? ($(stamp))" | tee -a "$out/summary.txt"
  for flags in "" "--cuda-graph" "--cuda-graph --no-fuse"; do
    # shellcheck disable=SC2086
    timeout 200 "$build/moegraph" bench e2e "$qwen3" --random-weights 1 --prompt-tokens 512 \
      --decode-tokens 128 $flags 2>&1 |
      sed "s/^/[bench e2e qwen3-shaped $flags] /" | tee -a "$out/summary.txt"
  done
  # The graph decode again with programmatic dependent launch off (framework/device/cuda/pdl.h):
  # what the launch overlap between the step's kernels is worth.
  MG_PDL=0 timeout 200 "$build/moegraph" bench e2e "$qwen3" --random-weights 1 --prompt-tokens 512 \
    --decode-tokens 128 --cuda-graph 2>&1 |
    sed "s/^/[bench e2e qwen3-shaped --cuda-graph MG_PDL=0] /" | tee -a "$out/summary.txt"
  # Where a decode step's time goes: device time per op (events) and nodes (kernel launches) per
  # op, and the wall time around it; with the fuse-ops pass on (the default) and off.
  for fuse in "" "--no-fuse"; do
    log="$out/profile_qwen3${fuse:+_nofuse}.txt"
    # shellcheck disable=SC2086
    timeout 200 "$build/moegraph" run "$qwen3" --device cuda --random-weights 1 --profile $fuse \
      --prompt-ids "$(seq -s, 1 512)" --max-new-tokens 64 > "$log" 2>&1
    echo "profile qwen3-shaped ${fuse:-fused} rc=$? ($(stamp))" | tee -a "$out/summary.txt"
    sed -n '/^decode: .*one-token/,$p' "$log" | sed "s/^/[profile ${fuse:-fused}] /" |
      tee -a "$out/summary.txt"
  done
  if [ "${MG_GPU_CHECK_HF:-0}" = 1 ]; then
    timeout 400 python3 tools/bench/hf_generate_bench.py --layers "$layers" \
      > "$out/hf_generate.txt" 2>&1
    echo "transformers generate rc=$? ($(stamp))" | tee -a "$out/summary.txt"
    sed "s/^/[transformers] /" "$out/hf_generate.txt" | tail -8 | tee -a "$out/summary.txt"
  fi
fi
if [ "${MG_GPU_CHECK_SERVE:-0}" = 1 ]; then
  # Batched generation on the Engine at 1, 8, 32 and 128 concurrent sequences on the
  # Qwen3-30B-A3B-shaped model (random weights made on the GPU), beside each step's floor; with
  # MG_GPU_CHECK_HF=1 also transformers' batched generate at the same sizes.
  unset MG_TEST_DTYPES
  qwen3="$build/qwen3-30b-a3b-shaped"
  layers="${MG_GPU_CHECK_QWEN3_LAYERS:-48}"
  if [ ! -e "$qwen3/model.pbtxt" ] && [ ! -e "$qwen3/model.pb" ]; then
    timeout 120 "$build/moegraph" make-model --family qwen3_moe --out "$qwen3" --layers "$layers" \
      --hidden 2048 --heads 32 --kv-heads 4 --head-dim 128 --experts 128 --topk 8 --moe-inter 768 \
      --vocab 151936 --max-seq-len 2048 --graph-only > "$out/make_qwen3.txt" 2>&1
  fi
  for flags in "--cuda-graph" ""; do
    # shellcheck disable=SC2086
    timeout 400 "$build/moegraph" bench serve "$qwen3" --random-weights 1 --batch 1,8,32,128 \
      --prompt-tokens 128 --decode-tokens 128 $flags > "$out/bench_serve${flags:+_graph}.txt" 2>&1
    echo "bench serve qwen3-shaped $flags rc=$? ($(stamp))" | tee -a "$out/summary.txt"
    sed "s/^/[bench serve $flags] /" "$out/bench_serve${flags:+_graph}.txt" | tee -a "$out/summary.txt"
  done
  if [ "${MG_GPU_CHECK_HF:-0}" = 1 ]; then
    timeout 580 python3 tools/bench/hf_generate_bench.py --layers "$layers" --batch 1,8,32,128 \
      --serve-prompt-tokens 128 --serve-decode-tokens 128 --repeats 1 --skip-batch1 \
      > "$out/hf_generate_batch.txt" 2>&1
    echo "transformers batched generate rc=$? ($(stamp))" | tee -a "$out/summary.txt"
    sed "s/^/[transformers batched] /" "$out/hf_generate_batch.txt" | tail -8 | tee -a "$out/summary.txt"
  fi
fi
echo "----"
cat "$out/summary.txt"
