#pragma once
// Tokenizers: Hugging Face tokenizer.json BPE (byte-level and SentencePiece-style, with
// tokenizer_config.json as transformers reads it), SentencePiece .model, llama2.c tok.bin.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {

/// Text <-> token ids. Implementations are immutable after construction and thread-safe to read.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// Token ids of `text`, exactly as the reference tokenizer gives them, with no BOS/EOS added
  /// (the caller decides: see Engine/CLI --bos). Special/added tokens in the text are matched.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  /// encode(text) with the special tokens the tokenizer's post-processor puts around it, as Hugging
  /// Face's encode(text, add_special_tokens=True) (tokenizer.json `post_processor`, e.g. Llama 3's
  /// <|begin_of_text|> first; Qwen3 adds nothing). Tokenizers without one: encode(text).
  virtual std::vector<int32_t> encode_with_special(std::string_view text) const { return encode(text); }
  /// UTF-8 text of a sequence of ids (invalid UTF-8 from partial byte tokens is kept as bytes).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  /// Display text of one token (for token views); not necessarily decode({id}).
  virtual std::string token_text(int32_t id) const = 0;
  virtual int32_t vocab_size() const = 0;
};

/// Loads the tokenizer of a model. `path` may be a tokenizer.json, a SentencePiece .model, a
/// llama2.c tok*.bin, or a model directory (tokenizer.json, then tokenizer.model, then tok*.bin).
/// A tokenizer.json with a tokenizer_config.json beside it loads as transformers does (see
/// load_hf_tokenizer with a config). Throws InputError naming the file on a missing or malformed file.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path);

/// BPE (byte-level or SentencePiece-style) from a Hugging Face tokenizer.json, exactly as the
/// `tokenizers` library runs it. Throws InputError(path, ...), also for a malformed model (vocab,
/// merges, unk_token, options: checked at load, not left to encode) and for an unsupported model
/// type, normalizer, pre-tokenizer, decoder or post-processor ("unsupported ... 'Type'").
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::filesystem::path& tokenizer_json);
/// The same as transformers 5 (AutoTokenizer) builds it with `tokenizer_config` (a
/// tokenizer_config.json; an empty path: none): its `tokenizer_class` LlamaTokenizer(Fast) rebuilds
/// the pipeline from the vocabulary and merges (Metaspace pre-tokenizer without split, byte
/// fallback, no normalizer; its `add_prefix_space` and `legacy` choose where a '▁' is prepended;
/// DeepSeek-V3's config names this class too, and gets transformers' ids, characters without a
/// token dropped); other classes keep tokenizer.json. Without a post_processor in tokenizer.json,
/// `add_bos_token` / `add_eos_token` with `bos_token` / `eos_token` give the special tokens. Throws
/// InputError naming the file at fault.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::filesystem::path& tokenizer_json,
                                             const std::filesystem::path& tokenizer_config);
/// SentencePiece .model (via libsentencepiece). Throws InputError if not built with it.
std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::filesystem::path& model_file);
/// llama2.c tok.bin: int32 max_token_length, then per token float32 score, int32 len, bytes.
/// encode() follows llama2.c run.c (dummy-prefix space, byte fallback +3, best-score merges).
/// Needs at least 259 tokens (3 special + 256 byte tokens). Throws InputError(tok_bin, ...).
std::unique_ptr<Tokenizer> load_llama2c_tokenizer(const std::filesystem::path& tok_bin, int32_t vocab_size);
/// The same from the file's bytes; errors name `source`.
std::unique_ptr<Tokenizer> load_llama2c_tokenizer_bytes(std::string_view bytes, int32_t vocab_size,
                                                        const std::filesystem::path& source);
/// load_hf_tokenizer from the text of a tokenizer.json; errors name `source`.
std::unique_ptr<Tokenizer> load_hf_tokenizer_text(std::string_view json_text, const std::filesystem::path& source);

}  // namespace kvscope
