#!/usr/bin/env bash
# Builds moegraph and runs the whole test suite (labels unit, e2e, slow, and cuda, whose tests
# skip with a message where no GPU is present). Under CI=true warnings are errors.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
if [ "${CI:-}" = "true" ]; then
  export MG_CMAKE_ARGS="${MG_CMAKE_ARGS:-} -DMG_WERROR=ON"
fi
tools/build.sh
ctest --test-dir "${MG_BUILD_DIR:-build}" --output-on-failure -j "${MG_JOBS:-$(nproc)}" "$@"
