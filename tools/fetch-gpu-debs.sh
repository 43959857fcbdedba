#!/usr/bin/env bash
# Downloads the Debian packages the GPU machine build needs into .carry/debs (it has no apt/network).
# Then: device run `bash tools/gpu.sh all` with carry [".carry"].
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/.carry/debs" && cd "$root/.carry/debs"
apt-get download nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev googletest libpcre2-dev libpcre2-8-0 \
  libbenchmark-dev libbenchmark1debian libsqlite3-dev libsqlite3-0 libzstd-dev libzstd1 libtomlplusplus-dev
# No Cairo there: tools/gpu.sh builds with KVSCOPE_WITH_VIZ=OFF.
