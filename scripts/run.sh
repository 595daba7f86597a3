#!/usr/bin/env bash
# The main job on a fresh machine: set-up if needed, build, `statecheck suite` on its shipped
# defaults (results/*.h5, results/summary.json, results/plots/*.png). Arguments are passed to the
# suite, e.g. scripts/run.sh --quick or scripts/run.sh --model kimi-linear-48b-a3b.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec "${STATECHECK_BUILD_DIR:-build}/statecheck" suite "$@"
