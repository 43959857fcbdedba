#!/usr/bin/env bash
# Decode speed of each model family at its real shape (random bf16 weights), 32K tokens, batch 1:
# the full cache, SnapKV and RocketKV at one budget, each as % of its own roofline (bench_pipeline),
# next to Llama-3.1-8B's. Run on the GPU machine after tools/gpu.sh build; JSON and text in $OUT.
#   device run: bash tools/gpu.sh build && bash tools/bench-families.sh   (carry: .carry)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
OUT=${OUT:-$root/out}
mkdir -p "$OUT"
context=${KVSCOPE_CONTEXT:-32768}
budget=${KVSCOPE_BUDGET:-1024}
status=0
for cfg in ${KVSCOPE_CONFIGS:-llama-3.1-8b qwen3-8b mistral-7b-v0.3 mistral-7b-v0.1 gemma-3-12b phi-3.5-mini}; do
  echo "== $cfg"
  pipelines=snapkv,rocketkv
  timeout 300 ./build-cuda/bench/bench_pipeline --random-init "bench/configs/$cfg.json" --device cuda --dtype bf16 \
    --context "$context" --decode-steps 16 --budgets "$budget" --pipelines "$pipelines" \
    --json "$OUT/bench_family_$cfg.json" 2>&1 | tee "$OUT/bench_family_$cfg.txt" | grep -v "^kvscope:" || status=1
done
exit $status
