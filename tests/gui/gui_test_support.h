#pragma once
// Shared by the GUI tests: a temporary directory and a small synthetic session database whose
// prompt is real Python text tokenized with the embedded pycode-16m tokenizer (when present).
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kvscope/core/head_pattern.h"
#include "kvscope/core/tokenizer.h"
#include "kvscope/sessions/session_store.h"
#include "synthetic.h"

namespace kvscope::gui::testing {

inline std::filesystem::path make_temp_dir(const std::string& tag) {
  std::string tmpl = (std::filesystem::temp_directory_path() / ("kvscope_" + tag + "_XXXXXX")).string();
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

/// Removes a directory tree without std::filesystem::remove_all (interposed by pip LibTorch).
inline void remove_tree(const std::filesystem::path& dir) {
  if (dir.empty()) return;
  const std::string cmd = "rm -rf '" + dir.string() + "'";
  [[maybe_unused]] const int rc = std::system(cmd.c_str());
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::filesystem::path source_dir() { return KVSCOPE_SOURCE_DIR; }
inline std::filesystem::path pycode_dir() { return source_dir() / "assets/models/pycode-16m"; }

/// ChatML as Qwen's templates write it, with the tokenizer's BOS first (so a run that added a BOS of
/// its own would show it twice).
inline constexpr const char* kChatMlTemplate =
    "{{ bos_token }}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// An instruct-model directory in `dir`: pycode-16m's config, weights and tokenizer (symbolic links;
/// its tokenizer has ChatML's <|im_start|> / <|im_end|> tokens) with kChatMlTemplate as
/// chat_template.jinja. Returns `dir`.
inline std::filesystem::path make_chat_model(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    std::filesystem::create_symlink(pycode_dir() / f, dir / f);
  std::ofstream(dir / "chat_template.jinja", std::ios::binary) << kChatMlTemplate;
  return dir;
}

/// Writes a synthetic session at `db` (model path = the embedded pycode-16m, so token texts load).
inline SyntheticRuns write_test_session(const std::filesystem::path& db, SyntheticSpec spec = {}) {
  std::unique_ptr<Tokenizer> tok;
  if (std::filesystem::exists(pycode_dir() / "tokenizer.json")) {
    tok = load_tokenizer(pycode_dir());
    spec.model_path = pycode_dir().string();
    if (spec.prompt_text.empty()) spec.prompt_text = read_text(pycode_dir() / "golden/prompts/argparse_head.py");
  }
  return write_synthetic_session(db.string(), spec, tok.get());
}

/// A head pattern for n_layer x n_head_kv: KV head 0 of every layer dense, the others streaming
/// with 4 sinks and a window of 16 x (layer + 1).
inline HeadPattern test_head_pattern(std::int64_t n_layer, std::int64_t n_head_kv) {
  HeadPattern p;
  p.method = "duo";
  p.budget = 0.5;
  p.layers.resize(static_cast<std::size_t>(n_layer));
  for (std::int64_t l = 0; l < n_layer; ++l)
    for (std::int64_t h = 0; h < n_head_kv; ++h)
      p.layers[static_cast<std::size_t>(l)].push_back(h == 0 ? HeadPlan{} : HeadPlan{true, 4, 16 * (l + 1)});
  return p;
}

/// Appends a complete run to `db` with the model, prompt and budget of run `like`, the pipeline
/// `heads:pattern=<pattern>` (as kvscope-cli records it) and the kept sets `p` gives on the prompt.
inline std::int64_t write_heads_run(const std::filesystem::path& db, std::int64_t like, const std::string& pattern,
                                    const HeadPattern& p) {
  auto store = sessions::SessionStore::open(db.string());
  sessions::RunInfo info = store.load_run(like).info;
  info.name = "learned head pattern";
  info.sweep_key.reset();
  info.pipeline = {"heads:pattern=" + pattern,
                   {{"head_pattern", "heads", {{"pattern", sessions::ParamType::kPath, pattern}}}}};
  const std::int64_t run = store.begin_run(info);
  const auto n = static_cast<std::int64_t>(info.prompt.tokens.size());
  for (std::int64_t l = 0; l < info.model.n_layer; ++l)
    for (std::int64_t h = 0; h < info.model.n_head_kv; ++h) {
      const HeadPlan plan = p.layers.at(static_cast<std::size_t>(l)).at(static_cast<std::size_t>(h));
      std::vector<std::int64_t> kept;
      for (std::int64_t i = 0; i < n; ++i)
        if (!plan.streaming || i < plan.sink || i >= n - plan.window) kept.push_back(i);
      store.add_blob(run, sessions::Blob::of<std::int64_t>("kept_positions", l, h,
                                                           {static_cast<std::int64_t>(kept.size())}, kept));
    }
  store.finish_run(run, {{42}, " x"});
  return run;
}

}  // namespace kvscope::gui::testing
