#!/usr/bin/env bash
# The whole test suite: install dependencies, build, run every test (CUDA tests skip without a GPU).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/install-deps.sh"
"$root/tools/build.sh"
cd "$root/build" && ctest --output-on-failure --timeout 900 -j "$(nproc)"
