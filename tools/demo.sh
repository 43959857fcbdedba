#!/usr/bin/env bash
# Set up and run the main job on the embedded models: install, build, sweep 4 pipelines x 3 budgets
# over pycode-16m's golden prompts into out/pycode.db, compare two runs and export figures; then a
# small task-accuracy evaluation (generated RULER needle-in-a-haystack samples, pycode-recall-17m,
# 4 pipelines x 2 budgets and the full cache) into out/eval.db and its accuracy-vs-budget figure.
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
# Task accuracy: 6 needle samples of 1K tokens, each context prefilled once for every pipeline.
"$cli" eval --model "$root/assets/models/pycode-recall-17m" --task niah_single_1 --length 1024 --n 6 --seed 1 \
  --pipeline snapkv:window=64,kernel=5,pool=avg --pipeline streamingllm:sink=4 --pipeline keydiff --pipeline tova \
  --compression-ratio 0.5 --compression-ratio 0.8 --db "$root/out/eval.db" --csv "$root/out/eval.csv"
"$cli" eval --model "$root/assets/models/pycode-recall-17m" --task niah_single_1 --length 1024 --n 6 --seed 1 \
  --db "$root/out/eval.db"
"$cli" export "$root/out/eval.db" 1 --figure accuracy --out "$root/out/accuracy.png"
echo "figures in $root/out/"
