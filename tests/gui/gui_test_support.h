#pragma once
// Shared by the GUI tests: a temporary directory and a small synthetic session database whose
// prompt is real Python text tokenized with the embedded pycode-16m tokenizer (when present).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "kvscope/core/tokenizer.h"
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

}  // namespace kvscope::gui::testing
