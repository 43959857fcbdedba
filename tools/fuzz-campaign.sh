#!/usr/bin/env bash
# A fuzz campaign over many cores from prebuilt libFuzzer targets (e.g. on a 16-core machine without
# clang): every target runs at once, in -fork mode with its share of the cores, then each target's
# corpus is minimised (-merge=1) and its final coverage measured.
#
#   tools/fuzz-campaign.sh pack PACK.tar.gz               (here: build-fuzz/ binaries, seeds, corpus)
#   tools/fuzz-campaign.sh run PACK.tar.gz SECONDS OUT    (there: fuzz, minimise, report)
#   tools/fuzz-campaign.sh keep OUT/corpus.tar.gz          (here: into tests/fuzz/corpus, to commit)
#
# `pack` builds the targets (tools/fuzz.sh 0), and packs them with the seeds, the committed corpus
# (tests/fuzz/corpus/<target>.tar.gz) and the local growing corpus (build-fuzz/fuzz-corpus). `run`
# writes OUT/corpus.tar.gz (the minimised corpus, one folder per target; `keep` packs each as
# tests/fuzz/corpus/<target>.tar.gz), OUT/report.tsv (target, cores, seconds, executions, final
# coverage and features, corpus files, findings) and OUT/artifacts.tar.gz (crashes, leaks, timeouts; empty if none).
# Exit 1 if any target found something.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:?pack or run}

if [[ $mode == pack ]]; then
  pack=$(realpath -m "${2:?PACK.tar.gz}")
  "$root/tools/fuzz.sh" 0 >/dev/null  # 0 s: builds every target and the seeds, fuzzes nothing
  stage=$(mktemp -d)
  mkdir -p "$stage/bin" "$stage/lib" "$stage/corpus"
  for t in "$root"/build-fuzz/tests/fuzz/fuzz_*; do [[ -x $t && -f $t ]] && cp "$t" "$stage/bin/"; done
  for lib in $(ldd "$stage"/bin/fuzz_session_open | awk '/sqlite|zstd/ {print $3}'); do cp -L "$lib" "$stage/lib/"; done
  cp -r "$root/build-fuzz/fuzz-seeds" "$stage/seeds"
  for a in "$root"/tests/fuzz/corpus/*.tar.gz; do
    mkdir -p "$stage/corpus/$(basename "$a" .tar.gz)" && tar -C "$stage/corpus/$(basename "$a" .tar.gz)" -xzf "$a"
  done
  for d in "$root"/build-fuzz/fuzz-corpus/*; do
    [[ -d $d ]] || continue
    mkdir -p "$stage/corpus/$(basename "$d")" && cp -n "$d"/* "$stage/corpus/$(basename "$d")/" 2>/dev/null || true
  done
  cp "$root/tests/fuzz/json.dict" "$stage/"
  tar -C "$stage" -czf "$pack" .  # gzip: the far machine may have no zstd
  echo "packed $(ls "$stage/bin" | wc -l) targets and $(find "$stage/corpus" -type f | wc -l) corpus files: $(du -h "$pack" | cut -f1)"
  rm -rf "$stage"
  exit 0
fi

if [[ $mode == keep ]]; then
  from=$(mktemp -d)
  tar -C "$from" -xzf "${2:?OUT/corpus.tar.gz}"
  for d in "$from"/fuzz_*; do  # reproducible archives: sorted, no owners, no times
    tar -C "$d" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - . |
      gzip -9n >"$root/tests/fuzz/corpus/$(basename "$d").tar.gz"
  done
  rm -rf "$from"
  exit 0
fi

[[ $mode == run ]] || { echo "usage: $0 pack PACK | run PACK SECONDS OUT | keep CORPUS" >&2; exit 2; }
pack=$(realpath "${2:?PACK.tar.gz}") seconds=${3:?SECONDS} out=$(realpath -m "${4:?OUT}")
work=$(mktemp -d)
mkdir -p "$out" && tar -C "$work" -xzf "$pack"
export LD_LIBRARY_PATH=$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
targets=($(cd "$work/bin" && ls fuzz_*))
cores=$(nproc)
# Cores per target: the slow ones (a file or a database per input, big JSON) get two where there
# are enough; the rest one.
declare -A share
spare=$((cores - ${#targets[@]}))
for t in "${targets[@]}"; do
  share[$t]=1
  case $t in fuzz_session_open | fuzz_tokenizer_json | fuzz_sweep_toml | fuzz_config_json | fuzz_safetensors_header)
    ((spare > 0)) && share[$t]=2 && spare=$((spare - 1)) ;;
  esac
done
options() {  # target -> its libFuzzer options (as tools/fuzz.sh)
  local max_len=16384
  [[ $1 == fuzz_session_open ]] && max_len=262144
  echo "-timeout=10 -rss_limit_mb=2048 -max_len=$max_len"
  case $1 in fuzz_safetensors_* | fuzz_config_json | fuzz_tokenizer_json | fuzz_head_pattern) echo "-dict=$work/json.dict" ;; esac
}
for t in "${targets[@]}"; do
  mkdir -p "$work/grow/$t" "$work/artifacts/$t" "$work/corpus/$t" "$work/seeds/$t"
  (cd "$work/artifacts/$t" && "$work/bin/$t" -fork="${share[$t]}" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -max_total_time="$seconds" $(options "$t") -artifact_prefix="$work/artifacts/$t/" -print_final_stats=1 \
    "$work/grow/$t" "$work/corpus/$t" "$work/seeds/$t" >"$work/artifacts/$t.log" 2>&1) &
done
wait
for t in "${targets[@]}"; do
  mkdir -p "$work/min/$t"
  # Minimise everything seen (old corpus, seeds, new inputs) into the smallest set with the same coverage.
  "$work/bin/$t" -merge=1 $(options "$t") "$work/min/$t" "$work/corpus/$t" "$work/seeds/$t" "$work/grow/$t" \
    >"$work/artifacts/$t.merge.log" 2>&1 &
done
wait
printf "target\tcores\tseconds\texecs\tcov\tft\tcorpus_files\tfindings\n" >"$out/report.tsv"
for t in "${targets[@]}"; do
  execs=$(grep -oP '^#\K[0-9]+' "$work/artifacts/$t.log" | tail -1 || true)
  # Coverage of the minimised corpus: what the campaign reached.
  final=$("$work/bin/$t" -runs=0 $(options "$t") "$work/min/$t" 2>&1 | grep -oP 'INITED cov: [0-9]+ ft: [0-9]+' | tail -1 || true)
  cov=$(grep -oP 'cov: \K[0-9]+' <<<"$final" || echo 0) ft=$(grep -oP 'ft: \K[0-9]+' <<<"$final" || echo 0)
  findings=$(find "$work/artifacts/$t" -type f | wc -l)
  printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$t" "${share[$t]}" "$seconds" "${execs:-0}" "$cov" "$ft" \
    "$(ls "$work/min/$t" | wc -l)" "$findings" >>"$out/report.tsv"
done
tar -C "$work/min" -czf "$out/corpus.tar.gz" .  # commit: one tests/fuzz/corpus/<target>.tar.gz per folder
tar -C "$work" -czf "$out/artifacts.tar.gz" artifacts
column -t "$out/report.tsv"
rm -rf "$work"
! awk -F'\t' 'NR > 1 && $8 > 0 {bad = 1} END {exit !bad}' "$out/report.tsv"
