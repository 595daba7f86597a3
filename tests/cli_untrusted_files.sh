#!/usr/bin/env bash
# The command line on untrusted states files (docs/robustness.md): every file under
# tests/data/fuzz/fuzz_hdf5_states/ and tests/data/fuzz/fuzz_safetensors/ (damaged or crafted
# inputs, crashes of earlier versions among them), a text file and an empty file must end
# `statecheck codec --drive states` with exit status 2, exactly one line on stderr naming the
# file, and no result or .partial file left behind.
#   tests/cli_untrusted_files.sh STATECHECK SOURCE_DIR WORK_DIR
set -uo pipefail
statecheck=$1
src=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
printf 'this is a text file, not states\n' >"$work/text.h5"
: >"$work/empty.safetensors"
fail=0
checked=0
for f in "$src"/tests/data/fuzz/fuzz_hdf5_states/* "$src"/tests/data/fuzz/fuzz_safetensors/* \
    "$work/text.h5" "$work/empty.safetensors"; do
  [ -f "$f" ] || continue
  case "$f" in *.md) continue ;; esac
  out="$work/out.h5"
  "$statecheck" codec --model "$src/tests/data/states/model_tiny_gdn.json" --drive states \
    --states "$f" --quick --out "$out" >"$work/stdout" 2>"$work/stderr"
  status=$?
  lines=$(wc -l <"$work/stderr")
  checked=$((checked + 1))
  if [ "$status" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qF "$f" "$work/stderr" ||
      [ -e "$out" ] || [ -e "$out.partial" ]; then
    echo "FAIL $f: exit $status, $lines stderr lines, left: $(ls "$work" | tr '\n' ' ')"
    head -c 2000 "$work/stderr"
    fail=1
  else
    echo "ok   $f: $(cat "$work/stderr")"
  fi
  rm -f "$out" "$out.partial"
done
echo "$checked files checked"
[ "$checked" -ge 3 ] || fail=1
exit $fail
