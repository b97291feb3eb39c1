#!/usr/bin/env bash
# Whole quantized models decoding on one GPU (issues 12 and 13), on the GPU machine: for each model
# below, `moegraph make-model --graph-only` writes the graph and `moegraph bench e2e --random-weights`
# makes its weights from a seed on the GPU (expert codes and scales included; cuda_wna16 and
# cuda_fp4 repack them there), runs a 512-token prompt and 64 decode steps as a CUDA graph,
# and prints tokens/s and the weight-bandwidth floor of batch-1 decode (quantized tensors at their
# packed bytes + scales, top-k of E experts, over the measured copy bandwidth).
#
#   qwen3-bf16   Qwen3-30B-A3B-shaped, 48 layers, BF16 experts (the reference point)
#   qwen3-int4   the same with W4A16 experts, INT4 codes, a scale per 128 (int4-g128: cuda_wna16)
#   oss20b       GPT-OSS-20B-shaped, 24 layers, 32 experts top-4, MXFP4 experts (cuda_fp4)
#   oss120b      GPT-OSS-120B-shaped, 128 experts top-4, MXFP4 experts (cuda_fp4), with
#                MG_OSS120B_LAYERS of its 36 layers (default all 36: cuda_fp4 keeps MXFP4's E8M0
#                scale bytes, 4.25 bits a value, 62 GB of experts; the F32 scale pairs it kept
#                before, 0.75 B a value, made 36 layers 88 GB and only 24 fitted 80 GB).
#
# GPT-OSS sizes are those of the released configs (../shared/reference/hf-moe-formats.md §3):
# hidden 2880, 64 heads, 8 KV heads of 64, expert width 2880, vocab 201088, a 128-token sliding
# window on every other layer, attention sinks, qkv and expert biases.
#
# Usage (repo root on the GPU machine, build-gpu built there: `cmake --build build-gpu --target
# moegraph`): tools/bench/quant_e2e_run.sh
# Each bench has its own time limit (120, 150, 120 and 280 s: 670 s in all, so two 10-minute
# calls, e.g. qwen3-bf16,qwen3-int4 then oss20b,oss120b). Environment: OUT (default quant-e2e-results); MG_BUILD_DIR (default build-gpu); MG_QUANT_E2E_MODELS
# (default qwen3-bf16,qwen3-int4,oss20b,oss120b: split them over two `run` calls when one 10-minute
# call is too short); MG_OSS120B_LAYERS (default 36); MG_E2E_FLAGS (default "--prompt-tokens 512
# --decode-tokens 64 --repeats 2 --cuda-graph").
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out="${OUT:-quant-e2e-results}"
mkdir -p "$out"
build="${MG_BUILD_DIR:-build-gpu}"
moegraph="$build/moegraph"
models=",${MG_QUANT_E2E_MODELS:-qwen3-bf16,qwen3-int4,oss20b,oss120b},"
oss120b_layers="${MG_OSS120B_LAYERS:-36}"
read -r -a e2e_flags <<< "${MG_E2E_FLAGS:---prompt-tokens 512 --decode-tokens 64 --repeats 2 --cuda-graph}"
start=$(date +%s)
stamp() { echo "$(( $(date +%s) - start ))s"; }
if [ ! -x "$moegraph" ]; then
  echo "$moegraph is missing: build it first (cmake --build $build --target moegraph)"
  exit 1
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/machine.txt" 2>&1
summary="$out/summary.md"
echo "| model | layers | experts | prefill tok/s | decode tok/s | floor tok/s | % of floor | GPU GiB peak | time |" > "$summary"
echo "|---|---|---|---|---|---|---|---|---|" >> "$summary"

qwen3=(--family qwen3_moe --hidden 2048 --heads 32 --kv-heads 4 --head-dim 128 --experts 128
       --topk 8 --moe-inter 768 --vocab 151936 --max-seq-len 4096)
gpt_oss=(--family gpt_oss --hidden 2880 --heads 64 --kv-heads 8 --head-dim 64 --topk 4
         --moe-inter 2880 --vocab 201088 --sliding-window 128 --max-seq-len 4096)

# run NAME LAYERS EXPERTS_LABEL TIMEOUT_S MAKE_MODEL_FLAGS...
run() {
  local name=$1 layers=$2 label=$3 limit=$4
  shift 4
  local dir="$out/graphs/$name" t0
  t0=$(date +%s)
  rm -rf "$dir"
  if ! "$moegraph" make-model --graph-only --out "$dir" --layers "$layers" "$@" \
      > "$out/$name.make.txt" 2>&1; then
    echo "$name: make-model failed: $(tail -1 "$out/$name.make.txt")" | tee -a "$out/summary.txt"
    return
  fi
  # GPU memory in use, sampled every second while the bench runs.
  ( while true; do
      nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1
      sleep 1
    done ) > "$out/$name.mem.txt" &
  local sampler=$!
  timeout "$limit" "$moegraph" bench e2e "$dir" --device cuda --random-weights 1 "${e2e_flags[@]}" \
    > "$out/$name.txt" 2>&1
  local rc=$?
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
  local peak
  peak=$(sort -n "$out/$name.mem.txt" | tail -1)
  peak=$(awk -v m="${peak:-0}" 'BEGIN { printf "%.1f", m / 1024 }')
  echo "$name: bench e2e rc=$rc ($(( $(date +%s) - t0 ))s, total $(stamp)), GPU peak ${peak} GiB" \
    | tee -a "$out/summary.txt"
  cat "$out/$name.txt"
  local prefill decode floor pct
  prefill=$(sed -n 's/^prefill: .* median \([0-9.]*\) tokens\/s.*/\1/p' "$out/$name.txt")
  decode=$(sed -n 's/^decode: .* median \([0-9.]*\) tokens\/s.*/\1/p' "$out/$name.txt")
  floor=$(sed -n 's/^floor: .*: \([0-9.]*\) tokens\/s$/\1/p' "$out/$name.txt")
  pct=$(sed -n 's/^decode at \([0-9.]*\)% of the weight-bandwidth floor$/\1/p' "$out/$name.txt")
  [ $rc -eq 0 ] || decode="failed (rc $rc: $(tail -1 "$out/$name.txt" | cut -c1-120))"
  echo "| $name | $layers | $label | ${prefill:--} | ${decode:--} | ${floor:--} | ${pct:--}% | $peak | $(( $(date +%s) - t0 ))s |" >> "$summary"
}

if [[ $models == *,qwen3-bf16,* ]]; then
  run qwen3-bf16 48 "BF16" 120 "${qwen3[@]}"
fi
if [[ $models == *,qwen3-int4,* ]]; then
  run qwen3-int4 48 "W4A16 int4-g128" 150 "${qwen3[@]}" --quant int4-g128
fi
if [[ $models == *,oss20b,* ]]; then
  run oss20b 24 "MXFP4, 32 top-4" 120 "${gpt_oss[@]}" --experts 32 --quant mxfp4
fi
if [[ $models == *,oss120b,* ]]; then
  if [ "$oss120b_layers" -lt 36 ]; then
    echo "oss120b: $oss120b_layers of GPT-OSS-120B's 36 layers (MG_OSS120B_LAYERS)" \
      | tee -a "$out/summary.txt"
  fi
  run oss120b "$oss120b_layers" "MXFP4, 128 top-4" 280 "${gpt_oss[@]}" --experts 128 --quant mxfp4
fi
echo "done ($(stamp))" | tee -a "$out/summary.txt"
cat "$summary"
