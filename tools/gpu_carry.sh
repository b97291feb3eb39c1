#!/usr/bin/env bash
# Build here, run there: a GPU machine starts bare and building the CUDA tree on it takes minutes
# of scarce device time, while the binaries built here (sm_90a, protobuf and cudart static,
# spdlog/fmt header-only: docs/gpu.md) run on it as they are. Two halves:
#
#   here:             tools/gpu_carry.sh pack [BUILD_DIR]
#                     -> build-carry/ (git-ignored): moegraph and tests/mg_cuda_tests xz-packed,
#                        the shared libraries the GPU image lacks (cpp-httplib), paths.env
#   the GPU machine:  source tools/gpu_carry.sh unpack      (from the repo root)
#                     -> $MG_CARRY/moegraph and $MG_CARRY/mg_cuda_tests ready to run
#
# The device tool's `run` brings the folder along with carry ["build-carry"] (64 MiB at most; the
# two binaries pack to about 12 MiB). The tests find their fixtures and the moegraph binary
# through the absolute paths compiled into them (MG_SOURCE_DIR, MG_MOEGRAPH_EXE: this checkout
# and its build folder), so unpack links those paths to the GPU machine's copy of the tree.
# No shell options are set: `unpack` is sourced into the caller's shell.

carry_pack() {
  local repo build out bytes
  repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  build="$(cd "${1:-${MG_BUILD_DIR:-$repo/build}}" 2> /dev/null && pwd)" || {
    echo "gpu_carry: no build folder ${1:-${MG_BUILD_DIR:-$repo/build}}" >&2
    return 1
  }
  for f in "$build/moegraph" "$build/tests/mg_cuda_tests"; do
    [ -x "$f" ] || { echo "gpu_carry: $f is missing: build it first" >&2; return 1; }
  done
  out="$repo/build-carry"
  rm -rf "$out" && mkdir -p "$out"
  cp "$build/moegraph" "$build/tests/mg_cuda_tests" "$out/"
  # cpp-httplib is a Debian shared library the GPU image does not have; everything else moegraph
  # links (cuBLAS, NCCL, libstdc++, OpenSSL, zlib, brotli) is there.
  ldd "$build/moegraph" | awk '/cpp-httplib/ {print $3}' | while read -r lib; do cp "$lib" "$out/"; done
  xz -T0 -6 "$out/moegraph" "$out/mg_cuda_tests" || return 1
  printf 'MG_CARRY_SOURCE_DIR=%q\nMG_CARRY_BUILD_DIR=%q\n' "$repo" "$build" > "$out/paths.env"
  bytes=$(du -sb "$out" | cut -f1)
  echo "gpu_carry: $out, $((bytes / 1048576)) MiB"
  if [ "$bytes" -gt $((64 * 1048576)) ]; then
    echo "gpu_carry: more than the 64 MiB a run may carry" >&2
    return 1
  fi
}

carry_unpack() {
  local carry="$PWD/build-carry" f
  [ -f "$carry/paths.env" ] || { echo "gpu_carry: no $carry/paths.env: run from the repo root after pack" >&2; return 1; }
  for f in "$carry"/*.xz; do
    [ -e "$f" ] && xz -d -f "$f"
  done
  chmod +x "$carry/moegraph" "$carry/mg_cuda_tests"
  # shellcheck disable=SC1091
  . "$carry/paths.env"
  # The packing checkout's paths, pointing at this copy of the tree (created only where absent).
  if [ ! -e "$MG_CARRY_SOURCE_DIR" ]; then
    mkdir -p "$(dirname "$MG_CARRY_SOURCE_DIR")" && ln -s "$PWD" "$MG_CARRY_SOURCE_DIR"
  fi
  mkdir -p "$MG_CARRY_BUILD_DIR" && ln -sf "$carry/moegraph" "$MG_CARRY_BUILD_DIR/moegraph"
  export LD_LIBRARY_PATH="$carry${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export MG_CARRY="$carry"
  echo "gpu_carry: $MG_CARRY/moegraph and $MG_CARRY/mg_cuda_tests ready"
}

case "${1:-}" in
  pack) shift; carry_pack "$@" ;;
  unpack) carry_unpack ;;
  *) echo "usage: tools/gpu_carry.sh pack [BUILD_DIR] | source tools/gpu_carry.sh unpack" >&2 ;;
esac
