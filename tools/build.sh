#!/usr/bin/env bash
# Configures and builds moegraph into ${MG_BUILD_DIR:-build} (Release, Ninja, ccache).
# Extra CMake arguments may be passed through MG_CMAKE_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${MG_BUILD_DIR:-build}"
jobs="${MG_JOBS:-$(nproc)}"
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release ${MG_CMAKE_ARGS:-}
cmake --build "$build_dir" -j "$jobs"
