#!/usr/bin/env bash
# Multi-turn evaluation (issue 33 item 6; docs/methods.md §1.5): RocketKV-MT against single-turn
# RocketKV and SnapKV on niah_multikey_1 with two later turns (each asks for another key of the same
# context), question-aware, pycode-recall-17m, as RocketKV's Fig. 6 (SCBench multi-turn) compares
# them. Per-turn scores from `kvscope-cli eval --json`; one summary line per configuration.
#   device run: bash tools/gpu.sh build && bash tools/multiturn-eval.sh [LENGTH] [N]   (carry: .carry)
#   here:       KVSCOPE_CLI=build/app/kvscope-cli DEVICE=cpu bash tools/multiturn-eval.sh 2048 4
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
len=${1:-8192} n=${2:-20}
cli=${KVSCOPE_CLI:-./build-cuda/app/kvscope-cli}
device=${DEVICE:-cuda}
OUT=${OUT:-$root/out}
mkdir -p "$OUT"
words=/usr/share/dict/american-english
[[ -f $words ]] || words=/tmp/kvscope-deps/usr/share/dict/american-english # wamerican from .carry/debs
wordnet=/usr/share/wordnet
[[ -d $wordnet ]] || wordnet=/tmp/kvscope-deps/usr/share/wordnet # wordnet-base from .carry/debs
common=(--words "$words" --wordnet "$wordnet" --model assets/models/pycode-recall-17m --task niah_multikey_1 --haystack noise --turns 2 --length "$len"
  --n "$n" --seed 11 --question-aware --device "$device" --json)
"$cli" eval "${common[@]}" >"$OUT/mt-full.json" || exit 1
"$cli" eval "${common[@]}" --pipeline snapkv --budget 64 --budget 128 --budget 256 --budget-unit stored \
  >"$OUT/mt-snapkv.json" || exit 1
"$cli" eval "${common[@]}" --pipeline rocketkv --pipeline rocketkv-mt --budget 64 --budget 128 --budget 256 \
  --budget-unit fetched >"$OUT/mt-rocketkv.json" || exit 1
python3 - "$OUT" <<'PY'
import json, sys
for name in ("full", "snapkv", "rocketkv"):
    j = json.load(open(f"{sys.argv[1]}/mt-{name}.json"))
    for r in j["results"]:
        n = len(r["samples"])
        turns = [sum(s["turns"][t]["score"] for s in r["samples"]) / n for t in range(3)]
        p = r["pipeline"]
        label = ("rocketkv-mt" if "rocketkv-mt" in p else "rocketkv" if "hsa" in p else
                 "snapkv" if "snapkv" in p else p)
        print(f"{label:12s} budget {str(r['budget']):>6s} mean {r['score']:.3f} turns " +
              " ".join(f"{x:.2f}" for x in turns) + f"  ({n} samples)")
PY
