#!/usr/bin/env bash
# Installs everything ptdp builds, tests and trains with, from Debian's packages.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build pkg-config git ca-certificates python3 \
  libopenblas-openmp-dev libluajit-5.1-dev luajit \
  libhdf5-openmpi-dev hdf5-tools openmpi-bin libopenmpi-dev \
  libgtest-dev googletest nlohmann-json3-dev libxxhash-dev libcli11-dev zlib1g-dev \
  binutils fortunes clang lld libclang-rt-14-dev >/dev/null
echo "install_deps: done"
