#!/usr/bin/env bash
# Formats every C++/CUDA source of the tree with the committed .clang-format (clang-format 14).
#   tools/format.sh          rewrite the files in place
#   tools/format.sh --check  list the files that differ and exit 1 if any (nothing is written)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | grep -v '^assets/')
if [[ ${1:-} == --check ]]; then
  bad=0
  for f in "${files[@]}"; do
    if ! clang-format "$f" | cmp -s - "$f"; then echo "$f"; bad=1; fi
  done
  exit $bad
fi
clang-format -i "${files[@]}"
