#!/usr/bin/env bash
# Learned head patterns vs online eviction at equal bytes (issue 7): learns HS-SFT and
# DuoAttention-style patterns on Python sources at several budgets, then measures each pattern and
# SnapKV / StreamingLLM given the same KV bytes by fidelity to the full cache (mean KL(full ||
# compressed) in nats and top-1 agreement over greedy decode steps) on held-out Python files.
# Prints a markdown table on stdout; progress on stderr; patterns, prompts and run JSON in $OUT_DIR.
#
#   tools/learn-heads-eval.sh cuda                       # the GPU comparison (docs/learned-heads.md)
#   STEPS=4 N_PROMPTS=2 BUDGETS="0.25 0.5" SEQ_LEN=256 tools/learn-heads-eval.sh cpu   # smoke run
#
# Environment (defaults in brackets):
#   KVSCOPE_CLI   kvscope-cli binary [first of build-cuda, build, build-policies /app/kvscope-cli]
#   MODEL         [assets/models/pycode-16m]
#   TRAIN_GLOB    training files ['/usr/lib/python3*/**/*.py']
#   HELDOUT_GLOB  held-out files [python3's purelib/**/*.py]; files matching TRAIN_GLOB are dropped
#   BUDGETS       ["0.1 0.25 0.5"]   STEPS [300]   BATCH [4]   SEQ_LEN [1024] (= the budget's reference length)
#   SINK [16]  WINDOW [64] (duo)  BLOCK [32] (hs-sft candidates {1..8} x BLOCK)
#   N_PROMPTS [16]   PROMPT_BYTES [3600] (about SEQ_LEN tokens of code for pycode-16m)
#   NEW_TOKENS [32]  OUT_DIR [out/learn-heads-eval]
#   FRESH [0]: 1 = relearn patterns and rerun everything; by default a pattern or run JSON already in
#   OUT_DIR is reused, so a run cut short (e.g. by a 10-minute command limit) continues where it was.
#
# Equal bytes: for every held-out prompt, a pattern's kept fraction f is read from its run
# (sum of kept entries over layers and KV heads / (n_layer * n_head_kv * n_prompt_tokens)), and
# SnapKV and StreamingLLM run with --budget f --budget-unit fraction on that same prompt.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
device=${1:?usage: tools/learn-heads-eval.sh DEVICE (cpu | cuda | cuda:i)}
cli=${KVSCOPE_CLI:-}
if [[ -z $cli ]]; then
  for c in build-cuda/app/kvscope-cli build/app/kvscope-cli build-policies/app/kvscope-cli; do
    [[ -x $c ]] && { cli=$c; break; }
  done
fi
[[ -x ${cli:-} ]] || { echo "learn-heads-eval: no kvscope-cli found (set KVSCOPE_CLI)" >&2; exit 2; }
model=${MODEL:-assets/models/pycode-16m}
train_glob=${TRAIN_GLOB:-'/usr/lib/python3*/**/*.py'}
heldout_glob=${HELDOUT_GLOB:-"$(python3 -c 'import sysconfig;print(sysconfig.get_paths()["purelib"])')/**/*.py"}
budgets=${BUDGETS:-0.1 0.25 0.5}
steps=${STEPS:-300}
batch=${BATCH:-4}
seq_len=${SEQ_LEN:-1024}
sink=${SINK:-16}
window=${WINDOW:-64}
block=${BLOCK:-32}
n_prompts=${N_PROMPTS:-16}
prompt_bytes=${PROMPT_BYTES:-3600}
new_tokens=${NEW_TOKENS:-32}
out=${OUT_DIR:-out/learn-heads-eval}
mkdir -p "$out/prompts" "$out/runs"
log() { echo "learn-heads-eval: $*" >&2; }

# Held-out prompts: files of the held-out glob not matched by the training glob, at least
# PROMPT_BYTES long, a seeded sample, each cut to PROMPT_BYTES at a line end.
python3 - "$train_glob" "$heldout_glob" "$n_prompts" "$prompt_bytes" "$out/prompts" <<'PY'
import glob, os, random, sys
train, heldout, n, size, dest = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
train_set = set(os.path.realpath(p) for p in glob.glob(train, recursive=True))
files = sorted(p for p in glob.glob(heldout, recursive=True)
               if os.path.isfile(p) and os.path.realpath(p) not in train_set and os.path.getsize(p) >= size)
if len(files) < n:
    sys.exit(f"learn-heads-eval: only {len(files)} held-out files of >= {size} bytes match '{heldout}' outside '{train}'")
for old in glob.glob(os.path.join(dest, "*.py")):
    os.remove(old)
for i, p in enumerate(random.Random(0).sample(files, n)):
    text = open(p, "rb").read()[:size].decode("utf-8", "replace")
    text = text[: text.rfind("\n") + 1] or text
    open(os.path.join(dest, f"{i:02d}.py"), "w").write(text)
    print(f"learn-heads-eval: prompt {i:02d} <- {p}", file=sys.stderr)
PY

fresh=${FRESH:-0}
if [[ $fresh == 1 ]]; then rm -f "$out"/runs/*.json "$out"/pattern-*.json; fi
run() {  # run NAME PIPELINE BUDGET PROMPT -> $out/runs/NAME.json (kept if already there)
  [[ -s $out/runs/$1.json ]] && return 0
  "$cli" run --model "$model" --device "$device" --bos always --prompt-file "$4" --max-new-tokens "$new_tokens" \
    --pipeline "$2" --budget "$3" --budget-unit fraction --reference full --json >"$out/runs/$1.json.tmp"
  mv "$out/runs/$1.json.tmp" "$out/runs/$1.json"
}
kept_fraction() {  # of a run JSON: kept entries / (layers * KV heads * prompt tokens)
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); n=len(j["input_ids"]); b=j["budgets"]
print(sum(map(sum,b))/(len(b)*len(b[0])*n))' "$1"
}

for b in $budgets; do
  for m in hs-sft duo; do
    pattern=$out/pattern-$m-$b.json
    if [[ ! -s $pattern ]]; then
      log "learning $m at budget $b ($steps steps)"
      "$cli" learn-heads --model "$model" --data "$train_glob" --method "$m" --budget "$b" --steps "$steps" \
        --batch "$batch" --seq-len "$seq_len" --reference-length "$seq_len" --sink "$sink" --window "$window" \
        --block "$block" --device "$device" --log-every 50 --out "$pattern" >&2
    fi
    log "evaluating $m at budget $b on $n_prompts prompts"
    for p in "$out"/prompts/*.py; do
      id=$(basename "$p" .py)
      run "$m-$b-$id" "heads:pattern=$pattern" 1 "$p"
      f=$(kept_fraction "$out/runs/$m-$b-$id.json")
      run "snapkv@$m-$b-$id" snapkv "$f" "$p"
      run "streamingllm@$m-$b-$id" "streamingllm:sink=$sink" "$f" "$p"
    done
  done
done

python3 - "$out/runs" "$budgets" "$model" "$steps" "$n_prompts" "$device" <<'PY'
import glob, json, os, sys
runs, budgets, model, steps, n, device = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
def summary(prefix):
    files = sorted(glob.glob(os.path.join(runs, prefix + "-*.json")))
    kl = top1 = kept = 0.0
    for f in files:
        j = json.load(open(f))
        b = j["budgets"]
        kept += sum(map(sum, b)) / (len(b) * len(b[0]) * len(j["input_ids"]))
        kl += j["fidelity"]["mean_kl"]
        top1 += j["fidelity"]["top1_agreement"]
    k = max(1, len(files))
    return kept / k, kl / k, top1 / k, len(files)
print(f"Model `{model}`, {steps} training steps, {n} held-out prompts, device {device}; "
      "KL(full || compressed) in nats and top-1 agreement with the full cache, mean over decode steps and prompts.\n")
print("| budget | method | kept fraction | mean KL | top-1 |")
print("|---:|---|---:|---:|---:|")
for b in budgets:
    for m in ("hs-sft", "duo"):
        for label, prefix in ((f"{m} pattern", f"{m}-{b}"), (f"SnapKV, bytes of {m}", f"snapkv@{m}-{b}"),
                              (f"StreamingLLM, bytes of {m}", f"streamingllm@{m}-{b}")):
            kept, kl, top1, count = summary(prefix)
            print(f"| {b} | {label} | {kept:.3f} | {kl:.4f} | {top1:.3f} |")
PY
