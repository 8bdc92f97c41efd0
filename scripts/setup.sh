#!/usr/bin/env bash
# The main job on a fresh Debian machine: install, build, train a small GPT on
# Debian's fortunes from a Lua script on the CPU, print validation loss and a sample.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
build/ptdp scripts/train_gpt.lua "$@"
