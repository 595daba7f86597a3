#!/usr/bin/env bash
# Set-up if needed, build, and run every test with ctest (GPU tests skip when no GPU is present);
# then scripts/ctest_skips.py prints how many tests were skipped and why, from ctest's log.
#   scripts/test.sh             release build in build/
#   scripts/test.sh --sanitize  host code with AddressSanitizer + UBSan in build-sanitize/ (no CUDA)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ "${1:-}" = "--sanitize" ]; then
  export STATECHECK_BUILD_DIR=build-sanitize
  scripts/build.sh -DSTATECHECK_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
else
  scripts/build.sh
fi
cd "${STATECHECK_BUILD_DIR:-build}"
status=0
ctest --output-on-failure -j "$(nproc)" || status=$?
/usr/bin/python3 ../scripts/ctest_skips.py . || true
exit "$status"
