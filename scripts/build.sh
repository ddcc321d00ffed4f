#!/usr/bin/env bash
# Configures and builds attnkit into build/ (Release, -march=native). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build "$@" >/dev/null
cmake --build build -j "$(nproc)"
