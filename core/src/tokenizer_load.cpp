// load_tokenizer(): picks the tokenizer loader from a file's name or a model directory's contents.
#include <algorithm>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvscope/core/errors.h"
#include "kvscope/core/tokenizer.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;

constexpr int32_t kReadUntilEnd = 0;  // load_llama2c_tokenizer: count the tokens in the file

/// The tokenizer_config.json beside `tokenizer_json`, or an empty path when there is none.
fs::path config_beside(const fs::path& tokenizer_json) {
  const fs::path config = tokenizer_json.parent_path() / "tokenizer_config.json";
  std::error_code error;
  return fs::is_regular_file(config, error) ? config : fs::path();
}

/// tokenizer.json, with its tokenizer_config.json when there is one (load_hf_tokenizer).
std::unique_ptr<Tokenizer> load_hf_with_config(const fs::path& tokenizer_json) {
  return load_hf_tokenizer(tokenizer_json, config_beside(tokenizer_json));
}

bool is_llama2c_name(const fs::path& file) {
  return file.extension() == ".bin" && file.filename().string().starts_with("tok");
}

/// The first (by name) tok*.bin in `dir`, if any.
std::optional<fs::path> find_llama2c_tokenizer(const fs::path& dir) {
  std::vector<fs::path> candidates;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && is_llama2c_name(entry.path())) candidates.push_back(entry.path());
  }
  if (candidates.empty()) return std::nullopt;
  return *std::min_element(candidates.begin(), candidates.end());
}

/// tokenizer.json; if it cannot be used (e.g. an unsupported model type) but the directory also
/// has a tokenizer.model that loads, that one (both describe the same vocabulary); else the
/// tokenizer.json error.
std::unique_ptr<Tokenizer> load_hf_or_sentencepiece(const fs::path& dir) {
  try {
    return load_hf_with_config(dir / "tokenizer.json");
  } catch (const InputError&) {
    if (!fs::is_regular_file(dir / "tokenizer.model")) throw;
    const auto json_error = std::current_exception();
    try {
      return load_sentencepiece_tokenizer(dir / "tokenizer.model");
    } catch (const InputError&) {
      std::rethrow_exception(json_error);
    }
  }
}

std::unique_ptr<Tokenizer> load_from_directory(const fs::path& dir) {
  if (fs::is_regular_file(dir / "tokenizer.json")) return load_hf_or_sentencepiece(dir);
  if (fs::is_regular_file(dir / "tokenizer.model")) return load_sentencepiece_tokenizer(dir / "tokenizer.model");
  if (const auto tok_bin = find_llama2c_tokenizer(dir)) return load_llama2c_tokenizer(*tok_bin, kReadUntilEnd);
  throw InputError(dir, "no tokenizer.json, tokenizer.model or tok*.bin in this directory");
}

std::unique_ptr<Tokenizer> load_from_file(const fs::path& file) {
  const std::string extension = file.extension().string();
  if (extension == ".json") return load_hf_with_config(file);
  if (extension == ".model") return load_sentencepiece_tokenizer(file);
  if (extension == ".bin") return load_llama2c_tokenizer(file, kReadUntilEnd);
  throw InputError(file, "unknown tokenizer file type (expected tokenizer.json, *.model or tok*.bin)");
}

}  // namespace

/// Loads the tokenizer at `path`: a tokenizer.json (*.json), a SentencePiece model (*.model), a
/// llama2.c tokenizer (*.bin, token count read to end of file), or a directory holding
/// tokenizer.json, else tokenizer.model, else tok*.bin (first by name). A tokenizer.json loads with
/// the tokenizer_config.json beside it, if any, as transformers does. A directory's
/// tokenizer.json that cannot be loaded falls back to its tokenizer.model when that one loads.
/// Throws InputError naming the path if it does not exist, has none of these, or fails to load.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path) {
  std::error_code error;
  if (!fs::exists(path, error)) throw InputError(path, "no such file or directory");
  if (fs::is_directory(path, error)) {
    try {
      return load_from_directory(path);
    } catch (const fs::filesystem_error& e) {
      throw InputError(path, std::string("cannot list directory: ") + e.what());
    }
  }
  return load_from_file(path);
}

}  // namespace kvscope
