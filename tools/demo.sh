#!/usr/bin/env bash
# Set up and run the main job on the embedded model: install, build, generate with pycode-16m.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/install-deps.sh"
"$root/tools/build.sh"
"$root/build/app/kvscope-cli" generate --model "$root/assets/models/pycode-16m" \
  --prompt-file "$root/assets/models/pycode-16m/golden/prompts/textwrap_head.py" --bos always --max-new-tokens 48 --greedy
