#!/usr/bin/env bash
# The desktop GUI driving live runs on the GPU machine, headless:
#   device run: bash tools/gpu.sh gui -- bash tools/gpu-gui-session.sh   (DISPLAY from tools/xvfb-gpu.sh)
# For each model below, the Run view starts a RocketKV run on CUDA from a --start-run request
# (its defaults: capture summary + the timeline on the CUDA-graph path):
#   <name>_mid.png       the Run view mid-run (live timeline, status bar: tokens/s, cache bytes);
#   <name>_run.png       the Run view when the run is recorded;
#   <name>_<view>.png    the recorded run's Timeline, Heads and Selection views;
# then the same run through kvscope-cli, and both runs' decode tokens/s from their databases
# (live.txt). Everything is packed into $OUT/live.tar.gz (the device tool returns 8 files at most).
set -uo pipefail
OUT=${OUT:?run this under tools/gpu.sh gui}
gui=./build-cuda/app/gui/kvscope
cli=./build-cuda/app/kvscope-cli
work=/tmp/kvscope-live
rm -rf "$work" && mkdir -p "$work"
log=$work/live.txt

# session NAME LAYER HEAD MID_STEP REQUEST_FIELDS CLI_ARGS...
session() {
  local name=$1 layer=$2 head=$3 mid=$4 fields=$5
  shift 5
  local db=$work/$name.db
  printf '{%s, "db_path": "%s", "name": "%s mid-run"}' "$fields" "$work/$name-mid.db" "$name" >"$work/$name-mid.json"
  printf '{%s, "db_path": "%s", "name": "%s gui"}' "$fields" "$db" "$name" >"$work/$name.json"
  echo "== $name" | tee -a "$log"
  # The shot at step MID ends the app, and with it that run: a database of its own.
  "$gui" --start-run "$work/$name-mid.json" --screenshot-at-step "$mid" --screenshot "$work/${name}_mid.png" \
    --size 1440x900 2>&1 | tee -a "$log"
  "$gui" --start-run "$work/$name.json" --screenshot "$work/${name}_run.png" --size 1440x900 2>&1 | tee -a "$log"
  for view in timeline heads selection; do
    "$gui" --open "$db" --run 1 --view "$view" --layer "$layer" --head "$head" \
      --screenshot "$work/${name}_$view.png" --size 1440x900 2>&1 | tee -a "$log"
  done
  "$cli" run "$@" --db "$work/$name-cli.db" --name "$name cli" >"$work/$name-cli.txt" 2>&1 ||
    { echo "kvscope-cli run failed:"; tail -5 "$work/$name-cli.txt"; } | tee -a "$log"
  local g c
  g=$("$cli" inspect "$db" | grep -o 'decode_tokens_per_s=[0-9.]*' | cut -d= -f2)
  c=$("$cli" inspect "$work/$name-cli.db" | grep -o 'decode_tokens_per_s=[0-9.]*' | cut -d= -f2)
  "$cli" inspect "$db" | tee -a "$log"
  "$cli" inspect "$work/$name-cli.db" | tee -a "$log"
  python3 -c "g, c = float('${g:-0}'), float('${c:-0}'); print(f'$name: decode tokens/s GUI {g:.1f}, CLI {c:.1f}, GUI/CLI {g / c if c else float(\"nan\"):.3f}')" |
    tee -a "$log"
}

# 1. The embedded pycode model (8K context) on a real prompt, RocketKV at 256 fetched entries.
prompt=assets/models/pycode-16m/golden/prompts/argparse_head.py
session pycode 3 1 200 \
  "\"model_path\": \"assets/models/pycode-16m\", \"prompt_file\": \"$prompt\", \"pipeline_spec\": \"rocketkv\", \"budget_unit\": \"fetched\", \"budget_value\": 256, \"max_new_tokens\": 800, \"device\": \"cuda\", \"dtype\": \"bf16\", \"capture\": \"summary\"" \
  --model assets/models/pycode-16m --prompt-file "$prompt" --pipeline rocketkv --budget 256 --budget-unit fetched \
  --max-new-tokens 800 --device cuda --dtype bf16 --capture summary

# 2. The 8B shape (random weights) at about 32K tokens of this repository's C++ as the prompt (the
#    pycode tokenizer encodes it), RocketKV at 1,024 fetched entries.
long=$work/long_prompt.txt
cat core/src/*.cpp core/src/policies/*.cpp app/gui/*.cpp app/figures/*.cpp sessions/src/*.cpp | head -c 100000 >"$long"
tok=assets/models/pycode-16m/tokenizer.json
session llama8b 16 3 300 \
  "\"random_init\": \"bench/configs/llama-3.1-8b.json\", \"tokenizer_path\": \"$tok\", \"prompt_file\": \"$long\", \"pipeline_spec\": \"rocketkv\", \"budget_unit\": \"fetched\", \"budget_value\": 1024, \"max_new_tokens\": 1000, \"device\": \"cuda\", \"dtype\": \"bf16\", \"capture\": \"summary\"" \
  --random-init bench/configs/llama-3.1-8b.json --tokenizer "$tok" --prompt-file "$long" --pipeline rocketkv \
  --budget 1024 --budget-unit fetched --max-new-tokens 1000 --device cuda --dtype bf16 --capture summary

(cd "$work" && tar -czf "$OUT/live.tar.gz" ./*.png live.txt ./*-cli.txt)
cp "$log" "$OUT/live.txt"
ls -la "$work"/*.png
