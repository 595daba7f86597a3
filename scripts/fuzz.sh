#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz (clang, ASan + UBSan, into build-fuzz/ or
# $STATECHECK_FUZZ_BUILD_DIR) and runs each for SECONDS (default 30; CI runs 30), starting from a
# seed corpus made of the shipped data and the regression inputs under tests/data/fuzz/.
#   scripts/fuzz.sh                 every harness, 30 s each
#   scripts/fuzz.sh 600             every harness, 10 min each (a longer hunt)
#   scripts/fuzz.sh 60 fuzz_trace   one harness
# The corpus grown by earlier runs (build-fuzz/corpus/) is reused. A crash stops that harness and
# the script (exit 1) and leaves the input in build-fuzz/findings/; it belongs, once fixed, in
# tests/data/fuzz/<harness>/, where tests/test_fuzz_regressions.cpp reads it (tests/fuzz/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(fuzz_safetensors fuzz_hdf5_states fuzz_trace fuzz_model_config fuzz_thresholds)
build=${STATECHECK_FUZZ_BUILD_DIR:-build-fuzz}
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (apt-get install clang)" >&2; exit 2; }
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DSTATECHECK_FUZZ=ON -DSTATECHECK_CUDA=OFF | { grep -- '-- statecheck:' || true; }
cmake --build "$build" -j "$(nproc)" --target "${harnesses[@]}"

# Seeds from the shipped data, one folder per harness, plus the regression inputs.
seed() {  # seed HARNESS FILE...
  mkdir -p "$build/seeds/$1"
  local h=$1
  shift
  for f in "$@"; do [ -f "$f" ] && cp "$f" "$build/seeds/$h/"; done
  return 0
}
rm -rf "$build/seeds"
seed fuzz_safetensors tests/data/states/*.safetensors
seed fuzz_hdf5_states tests/data/states/*.h5
seed fuzz_model_config data/models/*.json tests/data/states/model_tiny_gdn.json data/tinylm/config.json
seed fuzz_thresholds data/thresholds.json
mkdir -p "$build/seeds/fuzz_trace"
head -n 20 data/traces/mooncake_conversation_trace.jsonl >"$build/seeds/fuzz_trace/first20.jsonl"
head -n 1 data/traces/mooncake_conversation_trace.jsonl >"$build/seeds/fuzz_trace/first1.jsonl"
for h in fuzz_safetensors fuzz_hdf5_states fuzz_trace fuzz_model_config fuzz_thresholds; do
  [ -d "tests/data/fuzz/$h" ] && seed "$h" tests/data/fuzz/"$h"/*
done

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for h in "${harnesses[@]}"; do
  mkdir -p "$build/corpus/$h" "$build/findings"
  echo "fuzz.sh: $h for ${seconds} s"
  if ! "$build/$h" "$build/corpus/$h" "$build/seeds/$h" -max_total_time="$seconds" -timeout=20 \
      -rss_limit_mb=2560 -print_final_stats=1 -artifact_prefix="$build/findings/$h-" \
      >"$build/findings/$h.log" 2>&1; then
    echo "fuzz.sh: $h FOUND A CRASH (log: $build/findings/$h.log):" >&2
    grep -E "ERROR|SUMMARY|Test unit written" "$build/findings/$h.log" | head -5 >&2
    status=1
  else
    grep -E "^stat::number_of_executed_units|^#[0-9]+ *DONE" "$build/findings/$h.log" | tail -2
  fi
done
exit $status
