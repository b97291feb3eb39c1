#!/usr/bin/env bash
# The weight-only INT4 / INT8 (W4A16 / W8A16) bench of issue 12 with its peer and our BF16 backend
# in the same run, on the GPU machine:
#   1. `moegraph bench moe --quant Q` (cuda_wna16, random packed weights made on the GPU, every
#      point checked against the fp64 reference on the weights read back) for Q in int4-g128,
#      int4-channel (stage int4) and int8-g128, int8-channel (stage int8) on mixtral,
#      qwen3-30b-a3b, deepseek-v3 and gpt-oss-120b -> $OUT/wna16_Q.{txt,json}. gpt-oss-120b's
#      H = I = 2880 is not a multiple of 128, which cuda_wna16 refuses (a partial last group): its
#      g128 rows run with groups of 64 (as vLLM's MoeWNA16 halves the group for it, and the peer
#      below does) -> $OUT/wna16_Q_gpt-oss.{txt,json}, named int4-g64 / int8-g64 in the tables.
#   2. `moegraph bench moe --backend cuda_moe` (BF16 weights) on the same shapes and M
#      -> $OUT/wna16_bf16.{txt,json}: the "no slower than our BF16 backend" crossover.
#   3. vLLM's Triton fused_moe kernels through ../shared/peers/run_quant_peers.py, under CUDA-graph
#      replay: int8_w8a16 (per-channel int8, fused_moe_kernel) -> $OUT/wna16_peer_int8.{txt,json}
#      and int4_w4a16 (group 128, or 64 where H or I needs it; fused_moe_kernel_gptq_awq, which the
#      peer module must have assembled: its int4 functions raise otherwise, and that run alone
#      fails) -> $OUT/wna16_peer_int4.{txt,json}.
#   4. the side by side -> $OUT/wna16_side_by_side.md: per shape and M, each of our variants (us
#      and % of its floor), the peer (us and % of its own floor), ours / peer, BF16 cuda_moe and
#      ours / BF16 (below 1: the WNA16 backend is faster).
# The floors count the bytes a checkpoint stores: ours packed codes + 16-bit scales (+ packed zero
# points for uint*), the peer's its codes + bf16 group scales (int4) or F32 channel scales (int8).
# The peer module (vllm_fused_moe_quant, vllm_fused_moe) is a peer's code: it lives in the
# git-ignored .peer/ (never committed), with the harness copied to .peer/harness/ (the GPU machine
# has no ../shared); carry .peer to the run.
#
# Usage (repo root on the GPU machine): tools/bench/wna16_peer_run.sh
# Environment: OUT (default wna16-peer-results); MG_WNA16_STAGES (default
# build,int4,int8,bf16,peer,table; split them over several `run` calls when one 10-minute call is
# too short: the build stays on a warm machine, the results in $OUT); MG_WNA16_TOKENS (default
# 1,16,64,256,1024,4096); MG_WNA16_NO_CHECK=1 skips our fp64 check (faster; the check column then
# says -); MG_BUILD_DIR (default build-gpu); MG_CUDA_ARCHS (default 90a-real); MG_PEER_DIR
# (default .peer); MG_PEER_BUDGET_S (default 240: each run_quant_peers.py run's own time budget);
# MG_WNA16_PEER_MODES (default "int8_w8a16 int4_w4a16": the peer runs of stage peer).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out="${OUT:-wna16-peer-results}"
mkdir -p "$out"
build="${MG_BUILD_DIR:-build-gpu}"
peer="${MG_PEER_DIR:-.peer}"
stages=",${MG_WNA16_STAGES:-build,int4,int8,bf16,peer,table},"
tokens="${MG_WNA16_TOKENS:-1,16,64,256,1024,4096}"
check=()
if [ "${MG_WNA16_NO_CHECK:-0}" = 1 ]; then check=(--no-check); fi
start=$(date +%s)
stamp() { echo "$(( $(date +%s) - start ))s"; }
shapes_128=mixtral,qwen3-30b-a3b,deepseek-v3

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
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/machine.txt" 2>&1
fi

# bench_quant Q: Q on the three shapes whose sizes are multiples of 128, and gpt-oss-120b with
# groups of 64 where Q has groups of 128 (channel-wise takes any size).
bench_quant() {
  local q=$1 oss_q=$1
  if [[ $q == *-g128 ]]; then oss_q="${q%-g128}-g64"; fi
  local shapes=$shapes_128
  if [ "$oss_q" = "$q" ]; then shapes="$shapes_128,gpt-oss-120b"; fi
  "$build/moegraph" bench moe --quant "$q" --shape "$shapes" --tokens "$tokens" \
    ${check[@]+"${check[@]}"} --json "$out/wna16_$q.json" > "$out/wna16_$q.txt" 2>&1
  echo "bench $q rc=$? ($(stamp))" | tee -a "$out/summary.txt"
  cat "$out/wna16_$q.txt"
  if [ "$oss_q" != "$q" ]; then
    "$build/moegraph" bench moe --quant "$oss_q" --shape gpt-oss-120b --tokens "$tokens" \
      ${check[@]+"${check[@]}"} --json "$out/wna16_${q}_gpt-oss.json" \
      > "$out/wna16_${q}_gpt-oss.txt" 2>&1
    echo "bench $oss_q gpt-oss-120b rc=$? ($(stamp))" | tee -a "$out/summary.txt"
    cat "$out/wna16_${q}_gpt-oss.txt"
  fi
}

if [[ $stages == *,int4,* ]]; then
  bench_quant int4-g128
  bench_quant int4-channel
fi
if [[ $stages == *,int8,* ]]; then
  bench_quant int8-g128
  bench_quant int8-channel
fi

if [[ $stages == *,bf16,* ]]; then
  "$build/moegraph" bench moe --backend cuda_moe --shape "$shapes_128,gpt-oss-120b" \
    --tokens "$tokens" ${check[@]+"${check[@]}"} --json "$out/wna16_bf16.json" \
    > "$out/wna16_bf16.txt" 2>&1
  echo "bench bf16 cuda_moe rc=$? ($(stamp))" | tee -a "$out/summary.txt"
  cat "$out/wna16_bf16.txt"
fi

if [[ $stages == *,peer,* ]]; then
  harness="$peer/harness"
  if [ ! -f "$harness/run_quant_peers.py" ] || [ ! -f "$peer/vllm_fused_moe_quant.py" ]; then
    echo "peer: $harness/run_quant_peers.py or $peer/vllm_fused_moe_quant.py is missing" \
      "(copy ../shared/peers to $harness and carry $peer)" | tee -a "$out/summary.txt"
    exit 1
  fi
  # One run per mode: a peer module without the int4 kernel fails its own run only.
  for mode in ${MG_WNA16_PEER_MODES:-int8_w8a16 int4_w4a16}; do
    name="wna16_peer_${mode%%_*}"
    python3 "$harness/run_quant_peers.py" --peer-dir "$peer" --out "$out/$name.json" \
      --configs mixtral,qwen3-30b-a3b,deepseek-v3-routed,gpt-oss-120b-bf16 --ms "$tokens" \
      --only "$mode" --budget-s "${MG_PEER_BUDGET_S:-240}" > "$out/$name.txt" 2>&1
    echo "peer $mode rc=$? ($(stamp))" | tee -a "$out/summary.txt"
    tail -30 "$out/$name.txt"
  done
fi

if [[ $stages == *,table,* ]]; then
  python3 - "$out" > "$out/wna16_side_by_side.md" <<'PY'
import json, os, sys
out = sys.argv[1]


def load(name):
    path = os.path.join(out, name)
    return json.load(open(path)) if os.path.exists(path) else {}


def points(*names):
    """{(shape, tokens): point} of cuda_wna16 / cuda_moe points in the named bench files."""
    got = {}
    for name in names:
        for p in load(name).get("points", []):
            got[(p["shape"], p["tokens"])] = p
    return got


peer_names = {"mixtral": "mixtral", "qwen3-30b-a3b": "qwen3-30b-a3b",
              "deepseek-v3": "deepseek-v3-routed", "gpt-oss-120b": "gpt-oss-120b-bf16"}
shapes = ["mixtral", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-120b"]
bf16 = points("wna16_bf16.json")


def peer_cell(peer, mode, shape, m):
    rec = peer.get("configs", {}).get(peer_names[shape], {}).get("modes", {}).get(mode, {})
    row = rec.get("rows", {}).get(str(m), {})
    g = row.get("P3-graph", {})
    if "us" in g:
        return f"{g['us']:.1f} ({g['pct_floor']:.0f}%)", g["us"], rec.get("group_size")
    why = rec.get("skipped") or row.get("skipped") or row.get("error") or g.get("error")
    return (why or "-")[:60], None, rec.get("group_size")


def ours_cell(p):
    if not p:
        return "-", None
    bad = " FAIL" if p.get("check_failed") else ""
    return f"{p['median_us']:.1f} ({p['pct_of_floor']:.0f}%){bad}", p["median_us"]


def ratio(a, b):
    return f"{a / b:.2f}" if a is not None and b else "-"


def table(title, variants, peer_file, peer_mode):
    """variants: [(label, bench files)]; the first is compared with the peer and BF16."""
    peer = load(peer_file)
    rows = {label: points(*files) for label, files in variants}
    ms = sorted({m for r in rows.values() for (_, m) in r} | {m for (_, m) in bf16})
    print(f"## {title}\n")
    head = ["shape", "M"] + [f"{label} us (% floor)" for label, _ in variants]
    head += [f"vLLM Triton {peer_mode} graph us (% its floor)", f"{variants[0][0]} / peer",
             "BF16 cuda_moe us (% floor)", f"{variants[0][0]} / BF16"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for shape in shapes:
        for m in ms:
            cells, first = [], None
            for i, (label, _) in enumerate(variants):
                p = rows[label].get((shape, m))
                cell, us = ours_cell(p)
                cells.append(cell)
                if i == 0:
                    first = us
            pc, pus, _ = peer_cell(peer, peer_mode, shape, m)
            bc, bus = ours_cell(bf16.get((shape, m)))
            if all(c == "-" for c in cells) and pus is None and bus is None:
                continue
            print(f"| {shape} | {m} | " + " | ".join(cells) +
                  f" | {pc} | {ratio(first, pus)} | {bc} | {ratio(first, bus)} |")
    print()


table("W4A16 (int4; gpt-oss-120b with groups of 64)",
      [("int4-g128", ["wna16_int4-g128.json", "wna16_int4-g128_gpt-oss.json"]),
       ("int4-channel", ["wna16_int4-channel.json"])],
      "wna16_peer_int4.json", "int4_w4a16")
table("W8A16 (int8; gpt-oss-120b with groups of 64)",
      [("int8-channel", ["wna16_int8-channel.json"]),
       ("int8-g128", ["wna16_int8-g128.json", "wna16_int8-g128_gpt-oss.json"])],
      "wna16_peer_int8.json", "int8_w8a16")
print("Ours: cuda_wna16 (bench moe --quant, median of CUDA-event-timed calls, floor on the "
      "checkpoint's bytes); peer: vLLM's Triton kernel under CUDA-graph replay with its own floor "
      "(run_quant_peers.py); BF16: cuda_moe on BF16 weights. Ratios below 1: ours is faster.")
PY
  cat "$out/wna16_side_by_side.md"
fi
echo "done ($(stamp))" | tee -a "$out/summary.txt"
