#!/usr/bin/env bash
# The FP8 W8A8 bench of issue 11 with its peer in the same run, on the GPU machine:
#   1. `moegraph bench moe --quant fp8-block` (cuda_fp8) on mixtral, qwen3-30b-a3b, deepseek-v3 and
#      gpt-oss-120b at M = 1, 16, 256, 4096 -> $OUT/fp8_bench.{txt,json}
#   2. vLLM's Triton fused_moe_kernel in its FP8 block-scaled mode (use_fp8_w8a8, 128x128 weight
#      blocks, activations per token per 128 channels) through ../shared/peers/run_quant_peers.py on
#      the same shapes and M, under CUDA-graph replay -> $OUT/fp8_peer.{txt,json}
#   3. both side by side -> $OUT/fp8_side_by_side.md
#   (and, stage lt, cuda_cublaslt_fp8 timed and checked beside cuda_fp8 -> $OUT/fp8_bench_cublaslt.*)
# The peer module (vllm_fused_moe_quant, vllm_fused_moe) is a peer's code: it lives in the
# git-ignored .peer/ (never committed), with the harness copied to .peer/harness/ (the GPU machine
# has no ../shared); carry .peer to the run. vLLM's FP8 quantizer needs H and I divisible by 128,
# so the peer skips gpt-oss-120b (H = I = 2880) and says so in its JSON.
#
# Usage (repo root on the GPU machine): tools/bench/fp8_peer_run.sh
# Environment: OUT (default fp8-peer-results); MG_FP8_PEER_STAGES (default
# build,bench,lt,peer,table; lt: cuda_cublaslt_fp8 beside cuda_fp8, see below;
# split them over two `run` calls when one 10-minute call is too short: the build stays on a warm
# machine); MG_BUILD_DIR (default build-gpu); MG_CUDA_ARCHS (default 90a-real); MG_PEER_DIR
# (default .peer); MG_PEER_BUDGET_S (default 400: run_quant_peers.py's own time budget).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out="${OUT:-fp8-peer-results}"
mkdir -p "$out"
build="${MG_BUILD_DIR:-build-gpu}"
peer="${MG_PEER_DIR:-.peer}"
stages=",${MG_FP8_PEER_STAGES:-build,bench,lt,peer,table},"
tokens=1,16,256,4096
start=$(date +%s)
stamp() { echo "$(( $(date +%s) - start ))s"; }

if [[ $stages == *,build,* ]]; then
  if [ -d build-deps/lib/pkgconfig ]; then
    export PKG_CONFIG_PATH="$PWD/build-deps/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  fi
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMG_CUDA=ON \
    -DMG_CUDA_ARCHITECTURES="${MG_CUDA_ARCHS:-90a-real}" > "$out/configure.log" 2>&1 &&
    cmake --build "$build" --target moegraph -j "$(nproc)" > "$out/build.log" 2>&1
  rc=$?
  echo "build rc=$rc ($(stamp))" | tee -a "$out/summary.txt"
  if [ $rc -ne 0 ]; then
    grep -E "error|Error" "$out/build.log" | head -40
    exit 1
  fi
fi

if [[ $stages == *,bench,* ]]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/machine.txt" 2>&1
  "$build/moegraph" bench moe --quant fp8-block --shape mixtral,qwen3-30b-a3b,deepseek-v3,gpt-oss-120b \
    --tokens "$tokens" --json "$out/fp8_bench.json" > "$out/fp8_bench.txt" 2>&1
  echo "bench rc=$? ($(stamp))" | tee -a "$out/summary.txt"
  cat "$out/fp8_bench.txt"
fi

# The cross-check on real shapes: cuda_cublaslt_fp8 (per-expert cuBLASLt FP8 GEMMs) beside
# cuda_fp8; the bench's `check` column is each backend's normalized error against the first
# (cuda_fp8). gpt-oss-120b is left out: cuda_cublaslt_fp8 refuses H = 2880 (not a multiple of 128).
# Block scales on three shapes; per-channel and per-tensor weights (per-token activations) on one.
if [[ $stages == *,lt,* ]]; then
  "$build/moegraph" bench moe --quant fp8-block --shape mixtral,qwen3-30b-a3b,deepseek-v3 \
    --tokens "$tokens" --backend cuda_fp8,cuda_cublaslt_fp8 --json "$out/fp8_bench_cublaslt.json" \
    > "$out/fp8_bench_cublaslt.txt" 2>&1
  echo "bench cuda_cublaslt_fp8 rc=$? ($(stamp))" | tee -a "$out/summary.txt"
  for q in fp8-channel fp8-tensor; do
    "$build/moegraph" bench moe --quant "$q" --shape qwen3-30b-a3b --tokens 16,256 \
      --backend cuda_fp8,cuda_cublaslt_fp8 >> "$out/fp8_bench_cublaslt.txt" 2>&1
    echo "bench cuda_cublaslt_fp8 $q rc=$? ($(stamp))" | tee -a "$out/summary.txt"
  done
  cat "$out/fp8_bench_cublaslt.txt"
fi

if [[ $stages == *,peer,* ]]; then
  harness="$peer/harness"
  if [ ! -f "$harness/run_quant_peers.py" ] || [ ! -f "$peer/vllm_fused_moe_quant.py" ]; then
    echo "peer: $harness/run_quant_peers.py or $peer/vllm_fused_moe_quant.py is missing" \
      "(copy ../shared/peers to $harness and carry $peer)" | tee -a "$out/summary.txt"
    exit 1
  fi
  python3 "$harness/run_quant_peers.py" --peer-dir "$peer" --out "$out/fp8_peer.json" \
    --configs mixtral,qwen3-30b-a3b,deepseek-v3-routed,gpt-oss-120b-bf16 --ms "$tokens" \
    --only fp8_w8a8_block --budget-s "${MG_PEER_BUDGET_S:-400}" > "$out/fp8_peer.txt" 2>&1
  echo "peer rc=$? ($(stamp))" | tee -a "$out/summary.txt"
  tail -30 "$out/fp8_peer.txt"
fi

if [[ $stages == *,table,* ]] && [ -f "$out/fp8_bench.json" ] && [ -f "$out/fp8_peer.json" ]; then
  python3 - "$out/fp8_bench.json" "$out/fp8_peer.json" > "$out/fp8_side_by_side.md" <<'PY'
import json, sys
ours = json.load(open(sys.argv[1]))
peer = json.load(open(sys.argv[2]))
names = {"mixtral": "mixtral", "qwen3-30b-a3b": "qwen3-30b-a3b",
         "deepseek-v3": "deepseek-v3-routed", "gpt-oss-120b": "gpt-oss-120b-bf16"}
print("| shape | M | cuda_fp8 us (% floor) | vLLM Triton FP8 graph us (% its floor) | ours / peer |")
print("|---|---|---|---|---|")
for p in ours.get("points", []):
    if p["backend"] != "cuda_fp8":
        continue
    mode = peer.get("configs", {}).get(names.get(p["shape"], ""), {}).get("modes", {}).get(
        "fp8_w8a8_block", {})
    row = mode.get("rows", {}).get(str(p["tokens"]), {})
    g = row.get("P3-graph", {})
    if "us" in g:
        cell = f"{g['us']:.1f} ({g['pct_floor']:.1f}%)"
        ratio = f"{p['median_us'] / g['us']:.2f}"
    else:
        cell = mode.get("skipped") or row.get("skipped") or row.get("error") or g.get("error") or "-"
        ratio = "-"
    print(f"| {p['shape']} | {p['tokens']} | {p['median_us']:.1f} ({p['pct_of_floor']:.1f}%) "
          f"| {cell} | {ratio} |")
PY
  cat "$out/fp8_side_by_side.md"
fi
echo "done ($(stamp))" | tee -a "$out/summary.txt"
