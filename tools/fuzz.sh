#!/usr/bin/env bash
# Fuzzes every parser with libFuzzer (clang, ASan + UBSan), one target at a time.
#
#   tools/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 60 s each, every target)
#
# CI runs 20 s per target (tools/test.sh). A campaign over many cores: tools/fuzz-campaign.sh. Past
# campaigns' minimised corpus, tests/fuzz/corpus/<target>.tar.gz, is read as seeds.
# SECONDS 0: build the targets and the seeds only.
# Builds build-fuzz/ (clang), seeds from the real files in assets/ (tests/fuzz/make_seeds.py), and
# keeps the growing corpus in build-fuzz/fuzz-corpus/<target>. A crash, UB report, leak, timeout
# (> 10 s on one input) or out-of-memory (> 2 GB) is written to build-fuzz/fuzz-artifacts/<target>/
# and makes the script exit 1 after all targets ran; reproduce with build-fuzz/tests/fuzz/<target> FILE.
# Every run appends "date target seconds execs result" to build-fuzz/fuzz-log.txt (fuzz hours).
# KVSCOPE_FUZZ_SEED: libFuzzer's -seed (0, the default: a new random seed each run; CI fixes it so
# a short run walks the same inputs every time and a red CI means a reproducible bug).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
shift || true
all=(fuzz_safetensors_header fuzz_safetensors_index fuzz_config_json fuzz_tokenizer_json fuzz_llama2c_header
     fuzz_llama2c_tokenizer fuzz_pipeline_spec fuzz_sweep_toml fuzz_session_open fuzz_head_pattern
     fuzz_duo_gates fuzz_session_blob fuzz_timeline fuzz_chat_template fuzz_eval_samples)
targets=("$@")
((${#targets[@]} == 0)) && targets=("${all[@]}")

out=$root/build-fuzz
CC=clang CXX=clang++ cmake -S "$root" -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
  -DKVSCOPE_WITH_FUZZ=ON -DKVSCOPE_WITH_GUI=OFF -DKVSCOPE_BUILD_BENCH=OFF >/dev/null
cmake --build "$out" --target "${targets[@]}" --parallel "$(nproc)"

# Seeds: regenerated every time (small, from assets/); a session database from the CLI if built.
seeds=$out/fuzz-seeds
rm -rf "$seeds" && mkdir -p "$seeds"
db=""
if [[ -x $root/build/app/kvscope-cli ]]; then
  db=$seeds/session.db
  "$root/build/app/kvscope-cli" run --model "$root/assets/models/stories260K" --prompt "Once upon a time" \
    --pipeline snapkv:window=4 --compression-ratio 0.5 --max-new-tokens 3 --reference full --db "$db" >/dev/null 2>&1 || db=""
fi
python3 "$root/tests/fuzz/make_seeds.py" "$seeds" $db
((seconds == 0)) && exit 0  # built and seeded; nothing to fuzz (tools/fuzz-campaign.sh pack)

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TMPDIR=${TMPDIR:-/tmp}
failed=()
for t in "${targets[@]}"; do
  corpus=$out/fuzz-corpus/$t artifacts=$out/fuzz-artifacts/$t/
  mkdir -p "$corpus" "$artifacts"
  log=$out/fuzz-artifacts/$t.log
  max_len=16384
  [[ $t == fuzz_session_open ]] && max_len=262144
  dict=()
  case $t in fuzz_safetensors_* | fuzz_config_json | fuzz_tokenizer_json | fuzz_head_pattern | fuzz_eval_samples) dict=(-dict="$root/tests/fuzz/json.dict") ;; esac
  echo "== $t: ${seconds}s"
  rc=0
  committed=$out/fuzz-committed/$t  # the minimised corpus of past campaigns, tests/fuzz/corpus/<target>.tar.gz
  rm -rf "$committed" && mkdir -p "$committed"
  [[ -f $root/tests/fuzz/corpus/$t.tar.gz ]] && tar -C "$committed" -xzf "$root/tests/fuzz/corpus/$t.tar.gz"
  "$out/tests/fuzz/$t" -max_total_time="$seconds" -seed="${KVSCOPE_FUZZ_SEED:-0}" -timeout=10 -rss_limit_mb=2048 -max_len=$max_len \
    -artifact_prefix="$artifacts" -print_final_stats=1 "${dict[@]}" "$corpus" "$seeds/$t" "$committed" >"$log" 2>&1 || rc=$?
  execs=$(grep -m1 -oP 'stat::number_of_executed_units:\s*\K[0-9]+' "$log" || echo 0)
  result=ok
  if ((rc != 0)); then
    result=FAILED
    failed+=("$t")
    grep -m1 -E 'ERROR|runtime error|Test unit written|deadly signal|uncaught exception|timeout|out-of-memory' "$log" || true
    tail -n 30 "$log"
  fi
  echo "   $execs inputs, $(ls "$corpus" | wc -l) in corpus: $result"
  echo "$(date -u +%FT%TZ) $t $seconds $execs $result" >>"$out/fuzz-log.txt"
done
if ((${#failed[@]})); then
  echo "fuzz: findings in ${failed[*]} (inputs in build-fuzz/fuzz-artifacts/)" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, no findings"
