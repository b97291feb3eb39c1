#!/usr/bin/env bash
# The FP8 W8A8 bench of issue 11 with its peer in the same run, on the GPU machine:
#   1. `moegraph bench moe --quant fp8-block` (cuda_fp8) on mixtral, qwen3-30b-a3b, deepseek-v3 and
#      gpt-oss-120b at M = 1, 16, 256, 4096 -> $OUT/fp8_bench.{txt,json}
#   2. vLLM's Triton fused_moe_kernel in its FP8 block-scaled mode (use_fp8_w8a8, 128x128 weight
#      blocks, activations per token per 128 channels) through ../shared/peers/run_quant_peers.py on
#      the same shapes and M, under CUDA-graph replay -> $OUT/fp8_peer.{txt,json}
#   3. both side by side -> $OUT/fp8_side_by_side.md
#   (and, stage lt, cuda_cublaslt_fp8 timed and checked beside cuda_fp8 -> $OUT/fp8_bench_cublaslt.*)
#   stage sgmm: the second peer, torch._scaled_grouped_mm (tools/bench/torch_scaled_grouped_mm_peer.py,
#      our own torch code: route, per-token FP8 activation quantization, expert-contiguous
#      permutation, two FP8 grouped GEMMs, silu*mul, combine, under CUDA-graph replay). It takes
#      row-wise scales only, no 128x128 blocks, so it is compared with `bench moe --quant
#      fp8-channel` (per-output-channel weight scales, per-token activations), which this stage
#      also runs on the same shapes and M -> $OUT/fp8_channel_bench.{txt,json},
#      $OUT/fp8_sgmm_peer.{txt,json,md}; the table stage then writes
#      $OUT/fp8_channel_side_by_side.md. Where the GPU machine's torch lacks
#      torch._scaled_grouped_mm (or it fails there) the peer says so in one line and its JSON.
# The peer module (vllm_fused_moe_quant, vllm_fused_moe) is a peer's code: it lives in the
# git-ignored .peer/ (never committed), with the harness copied to .peer/harness/ (the GPU machine
# has no ../shared); carry .peer to the run. vLLM's FP8 quantizer needs H and I divisible by 128,
# so the peer skips gpt-oss-120b (H = I = 2880) and says so in its JSON.
#
# Usage (repo root on the GPU machine): tools/bench/fp8_peer_run.sh
# Environment: OUT (default fp8-peer-results); MG_FP8_PEER_STAGES (default
# build,bench,lt,peer,sgmm,table; lt: cuda_cublaslt_fp8 beside cuda_fp8, see below;
# split them over two `run` calls when one 10-minute call is too short: the build stays on a warm
# machine); MG_BUILD_DIR (default build-gpu); MG_CUDA_ARCHS (default 90a-real); MG_PEER_DIR
# (default .peer); MG_PEER_BUDGET_S (default 400: run_quant_peers.py's and
# torch_scaled_grouped_mm_peer.py's own time budget).
# E.g. MG_FP8_PEER_STAGES=sgmm,table tools/bench/fp8_peer_run.sh (ours per-channel and the torch
# peer only; the table stage writes each side-by-side table whose two inputs are in $OUT).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out="${OUT:-fp8-peer-results}"
mkdir -p "$out"
build="${MG_BUILD_DIR:-build-gpu}"
peer="${MG_PEER_DIR:-.peer}"
stages=",${MG_FP8_PEER_STAGES:-build,bench,lt,peer,sgmm,table},"
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

if [[ $stages == *,sgmm,* ]]; then
  if [ ! -f "$peer/harness/moe_common.py" ] || [ ! -f "$peer/harness/run_quant_peers.py" ]; then
    echo "sgmm: $peer/harness (a copy of ../shared/peers) is missing; carry $peer" |
      tee -a "$out/summary.txt"
    exit 1
  fi
  "$build/moegraph" bench moe --quant fp8-channel \
    --shape mixtral,qwen3-30b-a3b,deepseek-v3,gpt-oss-120b --tokens "$tokens" \
    --json "$out/fp8_channel_bench.json" > "$out/fp8_channel_bench.txt" 2>&1
  echo "bench fp8-channel rc=$? ($(stamp))" | tee -a "$out/summary.txt"
  cat "$out/fp8_channel_bench.txt"
  python3 tools/bench/torch_scaled_grouped_mm_peer.py --harness-dir "$peer/harness" \
    --out "$out/fp8_sgmm_peer.json" --md "$out/fp8_sgmm_peer.md" \
    --configs mixtral,qwen3-30b-a3b,deepseek-v3-routed,gpt-oss-120b-bf16 --ms "$tokens" \
    --budget-s "${MG_PEER_BUDGET_S:-400}" > "$out/fp8_sgmm_peer.txt" 2>&1
  echo "sgmm peer rc=$? ($(stamp))" | tee -a "$out/summary.txt"
  tail -30 "$out/fp8_sgmm_peer.txt"
fi

# One side-by-side table: ours (backend cuda_fp8 in a `bench moe --json` file) beside one peer
# column (ROW_KEY of MODE in a run_quant_peers.py-format JSON), matched by shape and M.
side_by_side() {  # OURS_JSON PEER_JSON MODE ROW_KEY OURS_LABEL PEER_LABEL
  python3 - "$@" <<'PY'
import json, sys
ours_file, peer_file, mode_key, row_key, ours_label, peer_label = sys.argv[1:7]
ours = json.load(open(ours_file))
peer = json.load(open(peer_file))
names = {"mixtral": "mixtral", "qwen3-30b-a3b": "qwen3-30b-a3b",
         "deepseek-v3": "deepseek-v3-routed", "gpt-oss-120b": "gpt-oss-120b-bf16"}
print(f"| shape | M | {ours_label} us (% floor) | {peer_label} us (% its floor) | ours / peer |")
print("|---|---|---|---|---|")
for p in ours.get("points", []):
    if p["backend"] != "cuda_fp8":
        continue
    mode = peer.get("configs", {}).get(names.get(p["shape"], ""), {}).get("modes", {}).get(
        mode_key, {})
    row = mode.get("rows", {}).get(str(p["tokens"]), {})
    g = row.get(row_key, {})
    if "us" in g:
        cell = f"{g['us']:.1f} ({g['pct_floor']:.1f}%)"
        ratio = f"{p['median_us'] / g['us']:.2f}"
    else:
        cell = (peer.get("unavailable") or mode.get("skipped") or mode.get("error")
                or row.get("skipped") or row.get("error") or g.get("error") or "-")
        ratio = "-"
    print(f"| {p['shape']} | {p['tokens']} | {p['median_us']:.1f} ({p['pct_of_floor']:.1f}%) "
          f"| {cell} | {ratio} |")
PY
}

if [[ $stages == *,table,* ]]; then
  if [ -f "$out/fp8_bench.json" ] && [ -f "$out/fp8_peer.json" ]; then
    side_by_side "$out/fp8_bench.json" "$out/fp8_peer.json" fp8_w8a8_block P3-graph cuda_fp8 \
      "vLLM Triton FP8 graph" > "$out/fp8_side_by_side.md"
    cat "$out/fp8_side_by_side.md"
  fi
  if [ -f "$out/fp8_channel_bench.json" ] && [ -f "$out/fp8_sgmm_peer.json" ]; then
    side_by_side "$out/fp8_channel_bench.json" "$out/fp8_sgmm_peer.json" fp8_channel_sgmm \
      SGMM-graph "cuda_fp8 fp8-channel" "torch _scaled_grouped_mm FP8 per-channel graph" \
      > "$out/fp8_channel_side_by_side.md"
    cat "$out/fp8_channel_side_by_side.md"
  fi
fi
echo "done ($(stamp))" | tee -a "$out/summary.txt"
