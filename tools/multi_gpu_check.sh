#!/usr/bin/env bash
# The multi-GPU checks of NCCL and the process-per-GPU runs (docs/parallel.md), for a machine
# with 2+ GPUs (nvidia-h200-x2 / -x4). On one GPU it runs the world-size-1 cases only.
#   1. build (build-gpu, like tools/gpu_check.sh; MG_MULTI_GPU_BUILD=0 uses it as it is),
#   2. the NCCL collective tests (tests/cuda/nccl_communicator_cuda_test.cc) as 1, 2 and 4
#      processes (as many as there are GPUs), each process one rank (torchrun's variables),
#   3. a dead rank: with MG_TEST_DEAD_RANK=1 rank 1 leaves; the others must fail within
#      MG_DIST_TIMEOUT_S (20 s here) instead of hanging,
#   4. the CUDA tests of the runs (NcclRun.*: world size 1 through NCCL, --tp 2 / --tp 2 --ep
#      over 2 GPUs vs one) and of the TP/EP expert shards (CudaMoEParallel.*),
#   5. a --tp 2 and a --tp 2 --ep run of a make-model Mixtral-8x7B-shaped BF16 model
#      (MG_MULTI_GPU_LAYERS layers, default 2) vs one GPU: generated ids and tokens/s, then
#      `bench e2e` of it on 1 GPU and under --tp 2 / --tp 2 --ep (prefill and decode tokens/s).
# Logs go to ${OUT:-multi-gpu-results}; a summary is printed last.
# NCCL_NVLS_ENABLE=0 everywhere: NVLink multicast can take a shared host's GPUs out of service.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export NCCL_NVLS_ENABLE=0
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out="${OUT:-multi-gpu-results}"
mkdir -p "$out"
build="build-gpu"
summary="$out/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
note "GPUs: $gpus"
nvidia-smi topo -m > "$out/topo.txt" 2>&1

if [ "${MG_MULTI_GPU_BUILD:-1}" != 0 ]; then
  if [ -d build-deps/lib/pkgconfig ]; then
    export PKG_CONFIG_PATH="$PWD/build-deps/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  fi
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMG_CUDA=ON -DMG_NCCL=ON \
    -DMG_CUDA_ARCHITECTURES="${MG_CUDA_ARCHS:-90a-real}" > "$out/configure.log" 2>&1 &&
    cmake --build "$build" -j "$(nproc)" --target moegraph mg_cuda_tests > "$out/build.log" 2>&1
  rc=$?
  note "build rc=$rc"
  if [ $rc -ne 0 ]; then grep -E "error|Error" "$out/build.log" | head -30; exit 1; fi
fi
tests="$build/tests/mg_cuda_tests"
exe="$build/moegraph"

# Runs `$tests` as $1 processes (one per GPU) with torchrun's variables; extra env in $2.
run_ranks() {
  local n=$1 extra=$2 log=$3 port=$((29600 + RANDOM % 1000)) pids=() rc=0
  for ((r = 0; r < n; r++)); do
    # shellcheck disable=SC2086  # $extra: VAR=value words for env
    env RANK="$r" WORLD_SIZE="$n" LOCAL_RANK="$r" LOCAL_WORLD_SIZE="$n" MASTER_ADDR=127.0.0.1 \
      MASTER_PORT="$port" $extra timeout 300 "$tests" --gtest_filter='NcclComm.*' \
      > "$log.rank$r" 2>&1 &
    pids+=($!)
  done
  for ((r = 0; r < n; r++)); do
    wait "${pids[$r]}" || rc=1
  done
  return $rc
}

for n in 1 2 4; do
  [ "$n" -le "$gpus" ] || continue
  run_ranks "$n" "" "$out/collectives_$n"
  rc=$?
  note "collectives on $n rank(s): rc=$rc ($(grep -h -E '^\[  (PASSED|FAILED) ' "$out"/collectives_$n.rank* | sort | uniq -c | tr '\n' ' '))"
done

if [ "$gpus" -ge 2 ]; then
  start=$(date +%s)
  run_ranks 2 "MG_DIST_TIMEOUT_S=20 MG_TEST_DEAD_RANK=1" "$out/dead_rank"
  rc=$?
  note "dead rank 1 of 2: rc=$rc in $(( $(date +%s) - start )) s (rank 0 must report PASSED: it got the error)"
  grep -h -E "did not finish|NCCL error|PASSED|FAILED" "$out"/dead_rank.rank0 | head -5 | tee -a "$summary"
fi

timeout 600 "$tests" --gtest_filter='NcclRun.*:CudaMoEParallel.*' > "$out/run_tests.log" 2>&1
note "NcclRun + CudaMoEParallel tests: rc=$? ($(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/run_tests.log" | tr '\n' ' '))"

if [ "$gpus" -ge 2 ]; then
  layers="${MG_MULTI_GPU_LAYERS:-2}"
  model="$out/mixtral"
  # Mixtral-8x7B's layer shape with weights written to a file (random weights made on the GPU
  # are refused by multi-rank layouts: each rank would have to make its shard; docs/parallel.md).
  "$exe" make-model --family mixtral --layers "$layers" --hidden 4096 --heads 32 --kv-heads 8 \
    --head-dim 128 --experts 8 --topk 2 --moe-inter 14336 --vocab 32000 --max-seq-len 4096 \
    --dtype bf16 --out "$model" > "$out/make_model.log" 2>&1
  note "make-model mixtral-8x7b-shaped ($layers layers): rc=$?"
  common=(run "$model" --device cuda --prompt-ids "1,2,3,4,5,6,7,8" --max-new-tokens 16)
  "$exe" "${common[@]}" > "$out/mixtral_1gpu.log" 2>&1
  note "1 GPU: rc=$? $(grep -h -E 'generated ids|tokens/s' "$out/mixtral_1gpu.log" | tr '\n' ' ')"
  for layout in "--tp 2" "--tp 2 --ep"; do
    name=$(echo "$layout" | tr -d ' -')
    # shellcheck disable=SC2086
    "$exe" --nproc-per-node 2 "${common[@]}" $layout > "$out/mixtral_$name.log" 2>&1
    note "$layout: rc=$? $(grep -h -E 'generated ids|tokens/s|error' "$out/mixtral_$name.log" | tr '\n' ' ')"
  done
  for layout in "--tp 2" "--tp 2 --ep"; do
    name=$(echo "$layout" | tr -d ' -')
    # shellcheck disable=SC2086
    "$exe" --nproc-per-node 2 bench e2e "$model" --device cuda --prompt-tokens 512 \
      --decode-tokens 64 --repeats 3 $layout > "$out/bench_$name.log" 2>&1
    note "bench e2e $layout: rc=$? $(grep -h -E 'prefill|decode|error' "$out/bench_$name.log" | tr '\n' ' ')"
  done
  "$exe" bench e2e "$model" --device cuda --prompt-tokens 512 --decode-tokens 64 --repeats 3 \
    > "$out/bench_1gpu.log" 2>&1
  note "bench e2e 1 GPU: rc=$? $(grep -h -E 'prefill|decode|error' "$out/bench_1gpu.log" | tr '\n' ' ')"
fi
echo "---- summary ($out) ----"
cat "$summary"
