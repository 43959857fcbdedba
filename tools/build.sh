#!/usr/bin/env bash
# Configures and builds kvscope (CPU LibTorch from Debian) into build/. Extra args go to cmake.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$root/build" --parallel "$(nproc)"
