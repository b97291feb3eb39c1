#!/usr/bin/env bash
# Quick start: install dependencies, build, and run the bundled model end to end.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
tools/build.sh
"${MG_BUILD_DIR:-build}"/moegraph run --prompt-ids 1,2,3,4,5,6,7,8 --max-new-tokens 16
