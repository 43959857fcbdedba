#pragma once
// TokenizerCache: each model's tokenizer loaded once (a model's tokenizer serves all its runs), and
// the token texts of a stored run from it.
#include <map>
#include <memory>
#include <string>

#include "run_data.h"

namespace kvscope {
class Tokenizer;
}

namespace kvscope::gui {

class TokenizerCache {
 public:
  TokenizerCache();
  ~TokenizerCache();
  TokenizerCache(const TokenizerCache&) = delete;
  TokenizerCache& operator=(const TokenizerCache&) = delete;
  /// The tokenizer of `model_path` (a HF directory, a llama2.c .bin or its directory, a tokenizer
  /// file), or null with `why` set when it does not load.
  const Tokenizer* get(const std::string& model_path, std::string* why);
  /// Token texts for a run of database `db_path` whose model is `model_path` (stored as given, so a
  /// relative path is also tried relative to the database's directory): empty when no tokenizer
  /// loads, with `why` set. Valid while this cache lives.
  figures::TokenText token_text(const std::string& model_path, const std::string& db_path, std::string* why);

 private:
  struct Entry;
  std::map<std::string, std::unique_ptr<Entry>> entries_;
};

}  // namespace kvscope::gui
