#!/usr/bin/env bash
# One call on the GPU machine (device tool): build against PyTorch's LibTorch with CUDA, run the
# test suite (CUDA tests included), then the benchmarks. Logs and JSON land in $OUT.
#   device run: bash tools/gpu.sh [build|test|bench|all]   (carry: .carry)
# The machine has no apt and no network: Debian headers/libs travel as .deb files in .carry/debs
# (tools/fetch-gpu-debs.sh) and are unpacked into a private prefix.
#
# The desktop GUI, headless (README "GPU build"). Its packages (~62 MiB) travel in parts of at most
# 18 MiB, .carry-gui/1..N (tools/fetch-gpu-debs.sh), one part per call, staged into /tmp, which
# the machine keeps only while it is warm (30 s after a call): fire the calls back to back.
#   device run: bash tools/gpu.sh stage-gui K              (carry: .carry-gui/K), K = 1 .. N-1
#   device run: bash tools/gpu.sh gui [-- COMMAND...]      (carry: .carry, .carry-gui/N)
# stage-gui K copies part K to /tmp/kvscope-gui-parts and, once every part is there, unpacks the
# packages into /tmp/kvscope-gui. gui stages the parts it was carried, builds build-cuda with the
# GUI and figures (once that prefix exists build|test|bench|all do too: one build dir serves all),
# starts Xvfb (tools/xvfb-gpu.sh: NVIDIA's GLX, else Mesa), then runs COMMAND from the repo root
# with DISPLAY set (default: ./build-cuda/app/gui/kvscope --screenshot $OUT/gui.png).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
what=${1:-all}
OUT=${OUT:-$root/out}
mkdir -p "$OUT"
export OUT
prefix=/tmp/kvscope-deps
gui_prefix=/tmp/kvscope-gui
gui_parts=/tmp/kvscope-gui-parts

die() {
  echo "gpu.sh: error: $*" >&2
  exit 1
}

# Part k: verify its chunk against the MANIFEST and copy it to $gui_parts.
stage_gui_part() {
  local k=$1 src=.carry-gui/$1
  [[ -f $src/MANIFEST ]] || die "no $src/MANIFEST here: name .carry-gui/$k in the call's carry (tools/fetch-gpu-debs.sh lays the parts out)"
  mkdir -p "$gui_parts" || die "cannot create $gui_parts"
  if [[ -f $gui_parts/MANIFEST ]] && ! cmp -s "$src/MANIFEST" "$gui_parts/MANIFEST"; then
    echo "stage-gui: part $k comes from another fetch than the parts staged before: starting over"
    rm -rf "${gui_parts:?}"/* "$gui_prefix"
  fi
  cp "$src/MANIFEST" "$gui_parts/MANIFEST" || die "cannot copy $src/MANIFEST"
  local kind idx sha size name
  while read -r kind idx sha size name; do
    [[ $kind == chunk && $idx == "$k" ]] || continue
    [[ -f $src/$name ]] || die "$src/$name missing (MANIFEST names it)"
    [[ $(sha256sum "$src/$name" | cut -d' ' -f1) == "$sha" ]] || die "$src/$name does not match its sha256 in the MANIFEST (a broken copy?)"
    cp "$src/$name" "$gui_parts/$name.tmp" && mv "$gui_parts/$name.tmp" "$gui_parts/$name" || die "cannot copy $name to $gui_parts"
    echo "stage-gui: part $k ($name, $size bytes) staged in $gui_parts"
    return 0
  done <"$src/MANIFEST"
  die "$src/MANIFEST names no chunk for part $k"
}

# The parts still missing from $gui_parts (checked by sha256), as "k k ...".
gui_missing_parts() {
  local kind idx sha size name missing=""
  [[ -f $gui_parts/MANIFEST ]] || { echo "all"; return; }
  while read -r kind idx sha size name; do
    [[ $kind == chunk ]] || continue
    if [[ ! -f $gui_parts/$name || $(stat -c %s "$gui_parts/$name") != "$size" ]]; then
      missing+="$idx "
    elif [[ ! -f $gui_parts/$name.ok ]]; then
      if [[ $(sha256sum "$gui_parts/$name" | cut -d' ' -f1) == "$sha" ]]; then touch "$gui_parts/$name.ok"; else missing+="$idx "; fi
    fi
  done <"$gui_parts/MANIFEST"
  echo "${missing% }"
}

# Once every part is staged: rebuild the tar, check every .deb, unpack them all into $gui_prefix.
stage_gui_finish() {
  if [[ -f $gui_prefix/.complete ]] && cmp -s "$gui_prefix/.complete" "$gui_parts/MANIFEST"; then
    echo "stage-gui: $gui_prefix is complete"
    return 0
  fi
  local missing n
  missing=$(gui_missing_parts)
  n=$(awk '$1 == "parts" { print $2 }' "$gui_parts/MANIFEST")
  if [[ -n $missing ]]; then
    echo "stage-gui: staged $((n - $(wc -w <<<"$missing"))) of $n parts; still to stage: $missing (bash tools/gpu.sh stage-gui K, carry .carry-gui/K)"
    return 0
  fi
  local debs=$gui_parts/debs kind idx sha size name
  rm -rf "$debs" "$gui_prefix.new" && mkdir -p "$debs" "$gui_prefix.new" || die "cannot create $debs"
  local chunks
  mapfile -t chunks < <(awk -v d="$gui_parts" '$1 == "chunk" { print d "/" $5 }' "$gui_parts/MANIFEST")
  cat "${chunks[@]}" | tar -xf - -C "$debs" ||
    die "cannot unpack the staged parts (tar)"
  while read -r kind sha size name; do
    [[ $kind == deb ]] || continue
    [[ $(sha256sum "$debs/$name" 2>/dev/null | cut -d' ' -f1) == "$sha" ]] || die "$name: missing or not matching its sha256 after reassembly"
    dpkg -x "$debs/$name" "$gui_prefix.new" || die "dpkg -x $name failed"
  done <"$gui_parts/MANIFEST"
  rm -rf "$gui_prefix" "$debs" && mv "$gui_prefix.new" "$gui_prefix" || die "cannot move $gui_prefix.new to $gui_prefix"
  cp "$gui_parts/MANIFEST" "$gui_prefix/.complete"
  echo "stage-gui: all $n parts staged; $(grep -c '^deb ' "$gui_parts/MANIFEST") packages unpacked into $gui_prefix"
}

stage_gui_carried() { # every .carry-gui/K this call carried; fails when there is none
  local d found=0
  for d in .carry-gui/[0-9]*; do
    [[ -f $d/MANIFEST ]] || continue
    stage_gui_part "${d#.carry-gui/}"
    found=1
  done
  ((found)) || return 1
  stage_gui_finish
}

gui_cmd=()
case $what in
  stage-gui)
    if [[ -n ${2:-} ]]; then
      [[ $2 =~ ^[0-9]+$ ]] || die "stage-gui takes a part number, not '$2'"
      stage_gui_part "$2"
      stage_gui_finish
    else
      stage_gui_carried || die "no .carry-gui/K here: name the part in the call's carry"
    fi
    exit 0
    ;;
  gui)
    shift
    [[ ${1:-} == -- ]] && shift
    gui_cmd=("$@")
    stage_gui_carried || true
    if [[ ! -f $gui_prefix/.complete ]]; then
      die "the GUI packages are not all staged in $gui_prefix; parts still missing: $(gui_missing_parts) (each: bash tools/gpu.sh stage-gui K with carry .carry-gui/K, back to back: a machine given back loses /tmp)"
    fi
    ;;
  build | test | bench | all) ;;
  *) die "unknown verb '$what' (build, test, bench, all, stage-gui K, gui [-- COMMAND...])" ;;
esac

if [[ ! -f $prefix/.unpacked ]]; then
  compgen -G ".carry/debs/*.deb" >/dev/null || die "no .carry/debs/*.deb here: run tools/fetch-gpu-debs.sh and name .carry in the call's carry"
  rm -rf $prefix && mkdir -p $prefix || die "cannot create $prefix"
  for f in .carry/debs/*.deb; do dpkg -x "$f" $prefix || die "dpkg -x $f failed"; done
  touch $prefix/.unpacked
fi
torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)') || die "python3 cannot import torch"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c 'import torch;print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$OUT/gpu.txt"

# Debian's prebuilt libgtest uses the C++11 string ABI; build GoogleTest from its carried source
# with LibTorch's flags when PyTorch was built with the other ABI.
gtest_src=""
if [[ $(python3 -c 'import torch;print(int(torch.compiled_with_cxx11_abi()))') == 0 ]]; then
  gtest_src=$prefix/usr/src/googletest
fi
echo "torch cxx11 abi: $(python3 -c 'import torch;print(torch.compiled_with_cxx11_abi())')" | tee -a "$OUT/gpu.txt"

# GUI and figures on when the GUI prefix is there. Its libraries are found through RPATH (not
# RUNPATH, so that libcairo's own dependencies resolve there too): tests, benchmarks and the
# GoogleTest discovery at build time run without LD_LIBRARY_PATH.
gui_on=0
[[ -f $gui_prefix/.complete ]] && gui_on=1
build_sig=$([[ $gui_on == 1 ]] && echo gui || echo nogui)
configure() {
  local flags=(-DKVSCOPE_WITH_GUI=OFF -DKVSCOPE_WITH_VIZ=OFF "-DCMAKE_EXE_LINKER_FLAGS=")
  local prefix_path="$torch_prefix;$prefix/usr"
  if ((gui_on)); then
    local libs=$gui_prefix/usr/lib/x86_64-linux-gnu:$gui_prefix/lib/x86_64-linux-gnu
    flags=(-DKVSCOPE_WITH_GUI=ON -DKVSCOPE_WITH_VIZ=ON
      "-DIMGUI_BACKENDS_DIR=$gui_prefix/usr/share/doc/libimgui-dev/examples/backends"
      "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags -Wl,-rpath,$libs")
    prefix_path+=";$gui_prefix/usr"
  fi
  cmake -S . -B build-cuda -DKVSCOPE_GTEST_SOURCE_DIR="$gtest_src" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSCOPE_WITH_CUDA=ON \
    "${flags[@]}" -DKVSCOPE_WITH_SENTENCEPIECE=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$prefix_path" >"$OUT/cmake.log" 2>&1 || { tail -40 "$OUT/cmake.log"; exit 1; }
}
build() { # [targets]: none = everything
  ninja -C build-cuda -j 16 "$@" >"$OUT/build.log" 2>&1 || { grep -E "error|Error" -A3 "$OUT/build.log" | head -60; exit 1; }
}
# build-cuda/.kvscope-built: "gui" or "nogui", the configuration of the last full build. test and
# bench build only when build-cuda lacks one of that configuration, gui only when it has no GUI
# binary (after editing the code on a warm machine: `bash tools/gpu.sh build` first).
marker=$(cat build-cuda/.kvscope-built 2>/dev/null)
if [[ $what == gui ]]; then
  if [[ ! -x build-cuda/app/gui/kvscope ]] || ! grep -q '^KVSCOPE_WITH_GUI:BOOL=ON' build-cuda/CMakeCache.txt 2>/dev/null; then
    configure
    build kvscope kvscope-cli
    [[ $marker == gui ]] || rm -f build-cuda/.kvscope-built
    echo "build ok (kvscope and kvscope-cli, GUI and figures on)"
  fi
elif [[ $what == build || $what == all || ! -x build-cuda/app/kvscope-cli || $marker != "$build_sig" ]]; then
  configure
  build
  echo "$build_sig" >build-cuda/.kvscope-built
  echo "build ok (GUI and figures $([[ $gui_on == 1 ]] && echo on || echo off))"
fi
status=0
# all: the GPU tests (CUDA kernels, golden checks on cuda) + benchmarks; test: the whole suite.
if [[ $what == test || $what == all ]]; then
  filter=""; [[ $what == all ]] && filter="-R Cuda"
  if ((gui_on)); then
    # shellcheck source=tools/xvfb-gpu.sh
    source tools/xvfb-gpu.sh files || exit 1 # fonts for the GUI tests, fontconfig for Cairo's
  fi
  (cd build-cuda && ctest $filter --output-on-failure -j 4 --timeout 600 >"$OUT/ctest.log" 2>&1) || status=1
  tail -15 "$OUT/ctest.log"
  grep -h "bf16 argmax agreement" build-cuda/Testing/Temporary/LastTest.log || true
fi
if [[ $what == bench || $what == all ]]; then
  ./build-cuda/bench/bench_engine --model assets/models/pycode-16m --device cuda --dtype bf16 --contexts 512,4000 \
    --json "$OUT/bench_pycode.json" 2>&1 | tee "$OUT/bench_pycode.txt"
  ./build-cuda/bench/bench_engine --random-init bench/configs/llama-3.1-8b.json --device cuda --dtype bf16 \
    --contexts ${KVSCOPE_CONTEXTS:-8192,32768,131072} --json "$OUT/bench_8b.json" 2>&1 | tee "$OUT/bench_8b.txt"
  ./build-cuda/bench/bench_engine --random-init bench/configs/llama-3.1-8b.json --device cuda --dtype bf16 --batch 8 \
    --contexts ${KVSCOPE_BATCH_CONTEXTS:-8192,32768} --json "$OUT/bench_8b_batch8.json" 2>&1 | tee "$OUT/bench_8b_batch8.txt"
  ./build-cuda/bench/bench_kernels 2>&1 | tee "$OUT/bench_kernels.txt" | tail -12
  for ctx in ${KVSCOPE_PIPELINE_CONTEXTS:-32768}; do
    ./build-cuda/bench/bench_pipeline --random-init bench/configs/llama-3.1-8b.json --device cuda --dtype bf16 \
      --context $ctx --decode-steps 16 --batch 8 --json "$OUT/bench_pipeline_$ctx.json" 2>&1 | tee "$OUT/bench_pipeline_$ctx.txt"
  done
  # Hugging Face transformers on the same shape and GPU, same call (decode and SDPA prefill).
  python3 bench/hf_generate.py --config bench/configs/llama-3.1-8b.json --contexts ${KVSCOPE_HF_CONTEXTS:-8192,32768} \
    --json "$OUT/bench_hf.json" 2>&1 | grep -v Warning | tee "$OUT/bench_hf.txt"
fi
if [[ $what == gui ]]; then
  gui_bin=./build-cuda/app/gui/kvscope
  [[ -x $gui_bin ]] || die "$gui_bin was not built (see $OUT/build.log)"
  # shellcheck source=tools/xvfb-gpu.sh
  if ! source tools/xvfb-gpu.sh "$gui_bin"; then
    kvscope_xvfb_stop
    tar -czf "$OUT/gui-logs.tar.gz" -C /tmp kvscope-gui-logs 2>/dev/null && echo "gui: Xvfb and probe logs in \$OUT/gui-logs.tar.gz"
    exit 1
  fi
  trap kvscope_xvfb_stop EXIT
  ((${#gui_cmd[@]})) || gui_cmd=("$gui_bin" --screenshot "$OUT/gui.png")
  echo "gui: DISPLAY=$DISPLAY GL vendor $KVSCOPE_GL_VENDOR: ${gui_cmd[*]}"
  "${gui_cmd[@]}"
  status=$?
  ((status == 0)) || echo "gui: the command exited $status (Xvfb and probe logs: /tmp/kvscope-gui-logs)"
fi
exit $status
