#include "tokenizer_cache.h"

#include <filesystem>

#include "kvscope/core/tokenizer.h"

namespace kvscope::gui {

struct TokenizerCache::Entry {
  std::unique_ptr<Tokenizer> tok;
  std::string why;
};

TokenizerCache::TokenizerCache() = default;
TokenizerCache::~TokenizerCache() = default;

const Tokenizer* TokenizerCache::get(const std::string& model_path, std::string* why) {
  auto it = entries_.find(model_path);
  if (it == entries_.end()) {
    auto e = std::make_unique<Entry>();
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path p(model_path);
    if (model_path.empty()) {
      e->why = "no model path stored";
    } else if (!fs::exists(p, ec)) {
      e->why = model_path + ": not found on this machine";
    } else {
      // A checkpoint file (llama2.c .bin): its tokenizer lives beside it.
      const std::string fname = p.filename().string();
      const bool tokenizer_file = p.extension() == ".json" || p.extension() == ".model" ||
                                  (p.extension() == ".bin" && fname.rfind("tok", 0) == 0);
      if (fs::is_regular_file(p, ec) && !tokenizer_file) p = p.parent_path();
      try {
        e->tok = load_tokenizer(p);
      } catch (const std::exception& ex) {
        e->why = ex.what();
      }
    }
    it = entries_.emplace(model_path, std::move(e)).first;
  }
  if (why) *why = it->second->why;
  return it->second->tok.get();
}

figures::TokenText TokenizerCache::token_text(const std::string& model_path, const std::string& db_path,
                                              std::string* why) {
  const Tokenizer* tok = get(model_path, why);
  if (!tok && !model_path.empty() && std::filesystem::path(model_path).is_relative()) {
    std::string why2;
    tok = get((std::filesystem::path(db_path).parent_path() / model_path).string(), &why2);
  }
  if (!tok) return {};
  return [tok](std::int32_t id) -> std::optional<std::string> {
    if (id < 0 || id >= tok->vocab_size()) return std::string();
    return tok->token_text(id);
  };
}

}  // namespace kvscope::gui
