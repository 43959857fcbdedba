#!/usr/bin/env bash
# Task accuracy on the GPU machine (issue 32's checks), after tools/gpu.sh build; logs and JSON in $OUT:
#   1. tools/eval-golden.py on pycode-recall-17m's golden RULER file, CPU fp32 (every core, one
#      process per group of configurations and shard), then the same on the GPU in fp32;
#   2. generated niah_single_1 at 2K/4K/8K, 30 samples each, full cache (GPU fp32), and the same
#      samples under SnapKV / StreamingLLM / KeyDiff / Ada-SnapKV at ratio 0.5, question-agnostic.
#   device run: bash tools/gpu.sh build && bash tools/eval-device.sh   (carry: .carry)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
OUT=${OUT:-$root/out}
mkdir -p "$OUT"
cli=./build-cuda/app/kvscope-cli
model=assets/models/pycode-recall-17m
status=0
export PYTHONUNBUFFERED=1
if [[ ${KVSCOPE_EVAL_PARTS:-golden-cpu,golden-gpu,niah} == *golden-cpu* ]]; then
  echo "== golden, CPU fp32 ($(nproc) cores)"
  OMP_NUM_THREADS=1 timeout 420 python3 tools/eval-golden.py --cli "$cli" --model "$model" --jobs "$(nproc)" \
    --shards "${KVSCOPE_SHARDS:-5}" --out "$OUT/eval_golden_cpu.json" | tee "$OUT/eval_golden_cpu.txt" || status=1
fi
if [[ ${KVSCOPE_EVAL_PARTS:-golden-cpu,golden-gpu,niah} == *golden-gpu* ]]; then
  echo "== golden, GPU fp32"
  timeout 300 python3 tools/eval-golden.py --cli "$cli" --model "$model" --device cuda --jobs 3 --shards 1 \
    --out "$OUT/eval_golden_gpu.json" | tee "$OUT/eval_golden_gpu.txt" || status=1
fi
if [[ ${KVSCOPE_EVAL_PARTS:-golden-cpu,golden-gpu,niah} == *niah* ]]; then
  echo "== niah_single_1, 2K/4K/8K x 30, GPU fp32"
  words=/usr/share/dict/american-english
  [[ -f $words ]] || words=/tmp/kvscope-deps/usr/share/dict/american-english  # wamerican from .carry/debs
  wordnet=/usr/share/wordnet
  [[ -d $wordnet ]] || wordnet=/tmp/kvscope-deps/usr/share/wordnet # wordnet-base from .carry/debs
  timeout 400 "$cli" eval --model "$model" --task niah_single_1 --words "$words" --wordnet "$wordnet" --length 2048 --length 4096 --length 8192 --n 30 \
    --device cuda --json --write-samples "$OUT/niah_single_1.jsonl" >"$OUT/niah_full.json" || status=1
  timeout 400 "$cli" eval --model "$model" --data "$OUT/niah_single_1.jsonl" --device cuda --json \
    --pipeline snapkv:window=64,kernel=5,pool=avg --pipeline streamingllm:sink=4 --pipeline keydiff \
    --pipeline snapkv:window=64,kernel=5,pool=avg+adakv:alpha=0.2 --compression-ratio 0.5 >"$OUT/niah_presses.json" ||
    status=1
  python3 - "$OUT" <<'PY'
import json, sys, collections
out = sys.argv[1]
for f in ("niah_full.json", "niah_presses.json"):
    try:
        j = json.load(open(f"{out}/{f}"))
    except Exception as e:
        print(f, "unreadable:", e)
        continue
    for r in j["results"]:
        by_len = collections.defaultdict(list)
        for s in r["samples"]:
            by_len[s["length"]].append(s["score"])
        cells = "  ".join(f"{l}: {sum(v)/len(v):.3f} (n={len(v)})" for l, v in sorted(by_len.items()))
        print(f"{r['pipeline']} @ {r['budget']}: {cells}")
PY
fi
exit $status
