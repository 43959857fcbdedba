// kvscope_gui_make_session OUT.db [--layers L] [--heads H] [--kv-heads K] [--head-dim D]
//                                 [--tokens T] [--steps S] [--keep F] [--summary-only]
// Writes a synthetic session database (three runs on one prompt, see app/gui/synthetic.h). The
// prompt is the embedded pycode-16m argparse prompt, tokenized with its tokenizer, repeated to T
// tokens.
#include <cstdio>
#include <cstring>
#include <string>

#include "gui_test_support.h"

int main(int argc, char** argv) {
  using namespace kvscope::gui;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0) {
    std::fprintf(stderr,
                 "usage: %s OUT.db [--layers L] [--heads H] [--kv-heads K] [--head-dim D] [--tokens T] [--steps S] "
                 "[--keep F] [--summary-only]\n",
                 argv[0]);
    return 2;
  }
  SyntheticSpec spec;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s: missing value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--layers")
      spec.n_layer = std::stoll(next());
    else if (a == "--heads")
      spec.n_head = std::stoll(next());
    else if (a == "--kv-heads")
      spec.n_head_kv = std::stoll(next());
    else if (a == "--head-dim")
      spec.head_dim = std::stoll(next());
    else if (a == "--tokens")
      spec.n_tok = std::stoll(next());
    else if (a == "--steps")
      spec.n_steps = std::stoll(next());
    else if (a == "--keep")
      spec.keep_fraction = std::stod(next());
    else if (a == "--summary-only")
      spec.full_capture = false;
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  try {
    const auto runs = kvscope::gui::testing::write_test_session(argv[1], spec);
    std::printf("wrote %s: runs %lld (snapkv+adakv), %lld (streamingllm), %lld (failed)\n", argv[1],
                static_cast<long long>(runs.snapkv), static_cast<long long>(runs.streaming),
                static_cast<long long>(runs.failed));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
