#!/usr/bin/env bash
# Runs every libFuzzer target of a fuzz build side by side for a fixed time, each with its own
# corpus, and prints per target: CPU seconds, executions, final coverage and findings.
# Usage: tools/fuzz_run.sh FUZZ_BUILD_DIR CORPUS_ROOT SECONDS WORKERS_PER_TARGET
#   FUZZ_BUILD_DIR: a build configured as docs/formats.md ("Fuzzing") says, with the targets and
#                   make_fuzz_seeds built;
#   CORPUS_ROOT:    corpora live in CORPUS_ROOT/<target>; seeds are regenerated into
#                   CORPUS_ROOT/seeds; findings go to CORPUS_ROOT/artifacts.
# Each worker is one libFuzzer process (-jobs/-workers), so CPU time = SECONDS x WORKERS.
# MG_FUZZ_TARGETS (default: all seven) picks the targets, e.g. "fuzz_hf_config".
set -uo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
build="$(realpath "$1")"
root="$(realpath -m "$2")"
seconds="$3"
workers="$4"

# fuzz_hf_config and its seeds read the committed HF fixtures of this checkout.
export MG_FUZZ_HF_FIXTURES="$repo/tests/fixtures/hf"
export MG_FUZZ_TOKENIZER_FIXTURES="$repo/tests/fixtures/tokenizers"
"$build/tests/fuzz/make_fuzz_seeds" "$root/seeds" > /dev/null
mkdir -p "$root/artifacts" "$root/logs"

declare -A corpus=([fuzz_safetensors]=safetensors [fuzz_graph_loader]=graph [fuzz_npy]=npy
                   [fuzz_hf_config]=hf [fuzz_tokenizer]=tokenizer
                   [fuzz_chat_template]=chat_template [fuzz_chat_request]=chat_request)
targets="${MG_FUZZ_TARGETS:-fuzz_safetensors fuzz_graph_loader fuzz_npy fuzz_hf_config fuzz_tokenizer fuzz_chat_template fuzz_chat_request}"
pids=()
for target in $targets; do
  c="${corpus[$target]}"
  mkdir -p "$root/$c" "$root/logs/$target"
  # -jobs = -workers: that many processes fuzz the shared corpus for the whole time (a job
  # ends only at -max_total_time or on a finding, which libFuzzer writes to -artifact_prefix).
  (cd "$root/logs/$target" &&
     exec "$build/tests/fuzz/$target" -dict="$repo/tests/fuzz/$c.dict" \
       -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -jobs="$workers" -workers="$workers" -artifact_prefix="$root/artifacts/$target-" \
       "$root/$c" "$root/seeds/$c" > "$root/logs/$target.log" 2>&1) &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done

printf '%-18s %8s %12s %10s %s\n' target cpu_s executions cov/ft findings
for target in $targets; do
  logs="$root/logs/$target"
  execs=$(cat "$logs"/fuzz-*.log 2>/dev/null | grep -h 'stat::number_of_executed_units' |
          awk '{s += $2} END {print s + 0}')
  cov=$(cat "$logs"/fuzz-*.log 2>/dev/null | grep -hE '^#[0-9]+.*(DONE|pulse|NEW|REDUCE)' |
        sed -nE 's/.*cov: ([0-9]+) ft: ([0-9]+).*/\1\/\2/p' | sort -t/ -k1,1n | tail -1)
  found=$(ls "$root/artifacts" 2>/dev/null | grep -c "^$target-" || true)
  printf '%-18s %8s %12s %10s %s\n' "$target" "$(( seconds * workers ))" "$execs" "${cov:-?}" "$found"
done
