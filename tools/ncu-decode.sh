#!/usr/bin/env bash
# Where a decode step's time goes, kernel by kernel (Nsight Compute on the GPU machine): runs
# bench_pipeline's full-cache decode at one context under ncu, keeps kvscope's own decode kernels
# (GEMV, RoPE/append, attention, norms), and prints per kernel and launch shape the launches per
# step, mean time, DRAM bytes and GB/s, then the step's kernel time against its bytes.
#   device run: bash tools/gpu.sh build && bash tools/ncu-decode.sh CONFIG [CONTEXT]   (carry: .carry)
# CONFIG names bench/configs/CONFIG.json. Kernels run one at a time under ncu (no PDL overlap, no
# launch gaps): the sum is the step's kernel time, not its wall time. Raw CSV: $OUT/ncu-CONFIG.csv.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
cfg=${1:?CONFIG} ctx=${2:-8192}
OUT=${OUT:-$root/out}
mkdir -p "$OUT"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[[ -x $ncu ]] || { echo "ncu-decode: no ncu on this machine" >&2; exit 1; }
layers=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['num_hidden_layers'])" "bench/configs/$cfg.json")
# Three decode steps of the warm-up run: kvscope's kernels only (prefill runs LibTorch's).
"$ncu" --clock-control none --cache-control none \
  --kernel-name regex:'gemv|rope_append|decode_split|combine|rms_norm|compact_split|silu_mul' \
  --launch-count $((layers * 12 * 3)) --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
  --csv --page raw ./build-cuda/bench/bench_pipeline --random-init "bench/configs/$cfg.json" --device cuda \
  --dtype bf16 --context "$ctx" --decode-steps 3 --budgets 1024 --pipelines none >"$OUT/ncu-$cfg.csv" 2>"$OUT/ncu-$cfg.err" ||
  { tail -20 "$OUT/ncu-$cfg.err" >&2; exit 1; }
python3 - "$OUT/ncu-$cfg.csv" "$layers" "$cfg" <<'PY'
import collections, csv, io, re, sys
text = open(sys.argv[1]).read()
start = text.find('"ID"')
rows = list(csv.DictReader(io.StringIO(text[start:])))[1:]  # the second row holds the units
layers, cfg = int(sys.argv[2]), sys.argv[3]
def num(r, k):
    v = r.get(k, "").replace(",", "")
    try: return float(v)
    except ValueError: return 0.0
def unit_scale(u):
    return {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "byte": 1,
            "Kbyte": 1e3, "KB": 1e3, "Mbyte": 1e6, "MB": 1e6, "Gbyte": 1e9, "GB": 1e9}.get(u, 1)
units = list(csv.DictReader(io.StringIO(text[start:])))[0]
ts = unit_scale(units.get("gpu__time_duration.sum", "nsecond"))
rs = unit_scale(units.get("dram__bytes_read.sum", "byte"))
ws = unit_scale(units.get("dram__bytes_write.sum", "byte"))
# Decode launches: a grid of rope/QKV work per layer; the steps are counted from the attention norms' shape.
agg = collections.OrderedDict()
for r in rows:
    found = re.search(r"(\w+_kernel)\b", r["Kernel Name"])
    name = found.group(1) if found else r["Kernel Name"][:28]
    key = (name, r.get("Grid Size", ""), r.get("Block Size", ""))
    a = agg.setdefault(key, [0, 0.0, 0.0])
    a[0] += 1
    a[1] += num(r, "gpu__time_duration.sum") * ts
    a[2] += (num(r, "dram__bytes_read.sum") * rs + num(r, "dram__bytes_write.sum") * ws)
# Decode steps profiled: launches of the kernel run once per layer (the most frequent grid / layers).
steps = max(1, round(max(a[0] for a in agg.values()) / layers / 2)) if agg else 1
print(f"== {cfg}: {len(rows)} launches profiled ({layers} layers, about {steps} decode steps)")
print(f"{'kernel':28s} {'grid':>16s} {'block':>12s} {'per step':>8s} {'mean us':>8s} {'MB':>8s} {'GB/s':>7s} {'us/step':>8s}")
tot_t = tot_b = 0.0
for (name, grid, block), (n, t, b) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    per = n / steps
    print(f"{name:28s} {grid:>16s} {block:>12s} {per:8.1f} {t / n:8.2f} {b / n / 1e6:8.2f} {b / t / 1e3 if t else 0:7.0f} {t / steps:8.1f}")
    tot_t += t / steps
    tot_b += b / steps
print(f"kernel time per step {tot_t:.0f} us, DRAM bytes per step {tot_b / 1e9:.3f} GB, {tot_b / tot_t / 1e3:.0f} GB/s")
PY
