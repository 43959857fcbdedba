// tokenizer.json as transformers 5 loads it with its tokenizer_config.json (AutoTokenizer): the
// tokenizer class named there may rebuild the pipeline from the vocabulary and merges, and the
// config's add_bos_token / add_eos_token give the special tokens of a file without a post-processor.
//
// Only the class whose rebuild changes ids is modelled: LlamaTokenizer (= LlamaTokenizerFast), used
// by Llama 2, Mistral, Phi-3 and also DeepSeek-V3's config. transformers 5 builds it as
// BPE(fuse_unk, byte_fallback, no unk_token) + Metaspace(split=False) and no normalizer, whatever
// tokenizer.json says: a text that starts with a space gets no second '▁' (tokenizer.json's Prepend
// normalizer would add one), and a byte-level vocabulary (DeepSeek-V3) loses every character it has
// no token for. The post-processor stays tokenizer.json's. Qwen2Tokenizer, GemmaTokenizer and
// PreTrainedTokenizerFast build what their tokenizer.json files already say.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "json_integers.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/tokenizer.h"
#include "text_file.h"
#include "tokenizer_hf.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kMetaspace = "\xE2\x96\x81";  // U+2581 '▁'

/// tokenizer_config.json `key` as a bool; `fallback` when absent or null.
bool config_bool(const json& config, const char* key, bool fallback, const fs::path& file) {
  if (!config.contains(key) || config.at(key).is_null()) return fallback;
  if (!config.at(key).is_boolean())
    throw InputError(file, std::string(key) + " must be true or false (got " + config.at(key).dump() + ")");
  return config.at(key).get<bool>();
}

/// `tokenizer_class` without a "Fast" suffix (LlamaTokenizerFast is LlamaTokenizer in transformers 5).
std::string tokenizer_class(const json& config, const fs::path& file) {
  if (!config.contains("tokenizer_class") || config.at("tokenizer_class").is_null()) return {};
  if (!config.at("tokenizer_class").is_string())
    throw InputError(file, "tokenizer_class must be a string (got " + config.at("tokenizer_class").dump() + ")");
  std::string name = config.at("tokenizer_class").get<std::string>();
  if (name.ends_with("Fast")) name.resize(name.size() - 4);
  return name;
}

/// A special token of the config: a string, or an AddedToken object {"content": ...}; nullopt if absent.
std::optional<std::string> config_token(const json& config, const char* key, const fs::path& file) {
  if (!config.contains(key) || config.at(key).is_null()) return std::nullopt;
  const json& value = config.at(key);
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value.at("content").is_string())
    return value.at("content").get<std::string>();
  throw InputError(
      file, std::string(key) + " must be a string or an object with a \"content\" string (got " + value.dump() + ")");
}

/// The id of `token` among tokenizer.json's added tokens, else its vocabulary; nullopt if neither has it.
std::optional<int32_t> token_id(const json& root, const std::string& token) {
  if (root.contains("added_tokens") && root.at("added_tokens").is_array()) {
    for (const json& added : root.at("added_tokens")) {
      if (added.is_object() && added.value("content", json()) == token && added.contains("id")) {
        if (const auto id = json_integer(added.at("id"), 0, INT32_MAX)) return static_cast<int32_t>(*id);
      }
    }
  }
  if (root.contains("model") && root.at("model").is_object() && root.at("model").contains("vocab")) {
    const json& vocab = root.at("model").at("vocab");
    if (vocab.is_object() && vocab.contains(token)) {
      if (const auto id = json_integer(vocab.at(token), 0, INT32_MAX)) return static_cast<int32_t>(*id);
    }
  }
  return std::nullopt;
}

/// transformers' LlamaTokenizer.__init__ over tokenizer.json's vocabulary and merges.
void rebuild_as_llama(json& root, const json& config, const fs::path& config_file) {
  if (!root.contains("model") || !root.at("model").is_object()) return;  // the loader names the problem
  json& model = root.at("model");
  if (model.contains("type") && model.at("type") != "BPE") return;  // another model fails to load anyway
  const bool add_prefix_space = config_bool(config, "add_prefix_space", true, config_file);
  const bool legacy = config_bool(config, "legacy", false, config_file);
  const char* scheme = !add_prefix_space ? "never" : legacy ? "always" : "first";
  model["fuse_unk"] = true;
  model["byte_fallback"] = true;
  model["unk_token"] = nullptr;
  model["ignore_merges"] = false;
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
  root["normalizer"] = nullptr;
  root["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", kMetaspace}, {"prepend_scheme", scheme}, {"split", false}};
  json decoders = json::array({{{"type", "Replace"}, {"pattern", {{"String", kMetaspace}}}, {"content", " "}},
                               {{"type", "ByteFallback"}},
                               {{"type", "Fuse"}}});
  if (add_prefix_space) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  root["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
}

/// TokenizersBackend.update_post_processor: "[bos] $A [eos]" from add_bos_token / add_eos_token.
void post_processor_from_config(json& root, const json& config, const fs::path& config_file) {
  json single = json::array();
  json special_tokens = json::object();
  const auto add = [&](const char* flag, const char* key) {
    if (!config_bool(config, flag, false, config_file)) return;
    const auto token = config_token(config, key, config_file);
    if (!token) throw InputError(config_file, std::string(flag) + " is true but there is no " + key);
    const auto id = token_id(root, *token);
    if (!id)
      throw InputError(config_file, std::string(flag) + " is true but " + key + " '" + *token +
                                        "' is not a token of tokenizer.json");
    single.push_back({{"SpecialToken", {{"id", *token}, {"type_id", 0}}}});
    special_tokens[*token] = {{"id", *token}, {"ids", {*id}}, {"tokens", {*token}}};
  };
  add("add_bos_token", "bos_token");
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  add("add_eos_token", "eos_token");
  root["post_processor"] = {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", special_tokens}};
}

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::filesystem::path& tokenizer_json,
                                             const std::filesystem::path& tokenizer_config) {
  json root = parse_tokenizer_json(read_text_file(tokenizer_json), tokenizer_json);
  if (!tokenizer_config.empty()) {
    const json config = parse_tokenizer_json(read_text_file(tokenizer_config), tokenizer_config);
    if (tokenizer_class(config, tokenizer_config) == "LlamaTokenizer") rebuild_as_llama(root, config, tokenizer_config);
    if (!root.contains("post_processor") || root.at("post_processor").is_null())
      post_processor_from_config(root, config, tokenizer_config);
  }
  return make_hf_tokenizer(root, tokenizer_json);
}

}  // namespace kvscope
