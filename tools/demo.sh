#!/usr/bin/env bash
# Set up and run the main job on the embedded model: install, build, sweep 4 pipelines x 3 budgets
# over pycode-16m's golden prompts into out/pycode.db, then compare two runs and export figures.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/install-deps.sh"
"$root/tools/build.sh"
cli="$root/build/app/kvscope-cli"
mkdir -p "$root/out"
"$cli" sweep "$root/assets/sweeps/pycode-golden.toml" --db "$root/out/pycode.db"
"$cli" inspect "$root/out/pycode.db"
# Run 2 is SnapKV at ratio 0.5 and run 5 Ada-SnapKV at 0.5 on the first prompt (grid order).
"$cli" compare "$root/out/pycode.db" 2 5
for fig in heads budgets tokens mass topk-cdf keys channels fidelity; do
  "$cli" export "$root/out/pycode.db" 5 --figure "$fig" --layer 3 --head 1 --out "$root/out/$fig.png"
done
"$cli" export "$root/out/pycode.db" 5 --figure grid --metric mean_kl --out "$root/out/grid.pdf"
echo "figures in $root/out/"
