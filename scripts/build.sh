#!/usr/bin/env bash
# Configures and builds statecheck into build/ (or $STATECHECK_BUILD_DIR). Extra arguments go to
# cmake's configure step, e.g. scripts/build.sh -DSTATECHECK_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${STATECHECK_BUILD_DIR:-build}
# Configure quietly but for statecheck's own option lines (errors still reach stderr).
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" | { grep -- '-- statecheck:' || true; }
cmake --build "$build" -j "$(nproc)"
