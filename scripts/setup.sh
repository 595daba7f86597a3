#!/usr/bin/env bash
# Installs the Debian packages that statecheck's build, tests and plots need.
# Idempotent: packages already present are not touched; apt-get runs only when one is missing.
# Usage: scripts/setup.sh            (as root, or with sudo available)
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  libeigen3-dev                  # fp32 reference recurrence
  libboost-program-options-dev   # command line
  libhdf5-dev hdf5-tools         # result files, h5dump
  libgtest-dev                   # tests
  nlohmann-json3-dev             # configs, safetensors headers, summaries
  libfmt-dev                     # formatting
  libssl-dev                     # SHA-256 of input files (OpenSSL libcrypto)
  python3 python3-matplotlib python3-h5py python3-numpy   # plots (Debian's /usr/bin/python3)
  clang-format
  clang libclang-rt-dev          # libFuzzer harnesses (scripts/fuzz.sh)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends "${missing[@]}"
