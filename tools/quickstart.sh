#!/usr/bin/env bash
# Quick start: install dependencies, build, and run the bundled model end to end.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
tools/build.sh
# The bundled model has random weights: the generated text is noise bytes (README, Quick start).
"${MG_BUILD_DIR:-build}"/moegraph run --prompt "The mixture of experts" --max-new-tokens 16
