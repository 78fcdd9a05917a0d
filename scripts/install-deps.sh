#!/usr/bin/env bash
# Installs the Debian packages shardcheck builds with, when any is missing.
#   scripts/install-deps.sh [EXTRA_PACKAGE...]   (scripts/coverage.sh adds llvm-14)
# libthrust-dev: the device code's OpenMP build where no CUDA toolkit brings CCCL (a
# GitHub runner), so that every CI runs the device code on threads.
set -euo pipefail
packages=(cmake ninja-build g++ clang libclang-rt-14-dev libeigen3-dev nlohmann-json3-dev
          libcli11-dev libfmt-dev libgtest-dev librapidcheck-dev libbenchmark-dev libomp-dev libthrust-dev
          zip unzip python3 python3-numpy "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
