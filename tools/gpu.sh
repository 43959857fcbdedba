#!/usr/bin/env bash
# One call on the GPU machine (device tool): build against PyTorch's LibTorch with CUDA, run the
# test suite (CUDA tests included), then the benchmarks. Logs and JSON land in $OUT.
#   device run: bash tools/gpu.sh [build|test|bench|all]   (carry: .carry)
# The machine has no apt and no network: Debian headers/libs travel as .deb files in .carry/debs
# (tools/fetch-gpu-debs.sh) and are unpacked into a private prefix.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
what=${1:-all}
OUT=${OUT:-$root/out}
mkdir -p "$OUT"
prefix=/tmp/kvscope-deps
if [[ ! -d $prefix ]]; then
  mkdir -p $prefix
  for f in .carry/debs/*.deb; do dpkg -x "$f" $prefix; done
fi
torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c 'import torch;print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$OUT/gpu.txt"

# Debian's prebuilt libgtest uses the C++11 string ABI; build GoogleTest from its carried source
# with LibTorch's flags when PyTorch was built with the other ABI.
gtest_src=""
if [[ $(python3 -c 'import torch;print(int(torch.compiled_with_cxx11_abi()))') == 0 ]]; then
  gtest_src=$prefix/usr/src/googletest
fi
echo "torch cxx11 abi: $(python3 -c 'import torch;print(torch.compiled_with_cxx11_abi())')" | tee -a "$OUT/gpu.txt"
if [[ $what == build || $what == all || ! -x build-cuda/app/kvscope-cli ]]; then
  cmake -S . -B build-cuda -DKVSCOPE_GTEST_SOURCE_DIR="$gtest_src" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSCOPE_WITH_CUDA=ON -DKVSCOPE_WITH_GUI=OFF -DKVSCOPE_WITH_VIZ=OFF \
    -DKVSCOPE_WITH_SENTENCEPIECE=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr" >"$OUT/cmake.log" 2>&1 || { tail -40 "$OUT/cmake.log"; exit 1; }
  ninja -C build-cuda -j 16 >"$OUT/build.log" 2>&1 || { grep -E "error|Error" -A3 "$OUT/build.log" | head -60; exit 1; }
  echo "build ok"
fi
status=0
# all: the GPU tests (CUDA kernels, golden checks on cuda) + benchmarks; test: the whole suite.
if [[ $what == test || $what == all ]]; then
  filter=""; [[ $what == all ]] && filter="-R Cuda"
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
exit $status
