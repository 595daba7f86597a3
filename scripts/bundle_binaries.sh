#!/usr/bin/env bash
# Copies the built binaries and every shared library they need that is not part of the C/C++
# runtime or the CUDA driver into DIR (default .device/), so they can run on another x86-64
# Linux machine with LD_LIBRARY_PATH=DIR/lib (e.g. a GPU machine without this project's
# packages). Usage: scripts/bundle_binaries.sh [DIR] [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.device}
build=${2:-build}
mkdir -p "$out/bin" "$out/lib"
for b in statecheck statecheck_tests statecheck_gpu_tests; do
  [ -x "$build/$b" ] && cp "$build/$b" "$out/bin/"
done
ldd "$out"/bin/* | awk '/=>/ {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libgcc_s.so*|libstdc++.so*|ld-linux*|libcuda.so*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
du -sh "$out"
