#pragma once
// Tokenizers: tokenizer.json byte-level BPE (HF `tokenizers`), SentencePiece .model, llama2.c tok.bin.
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
  /// UTF-8 text of a sequence of ids (invalid UTF-8 from partial byte tokens is kept as bytes).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  /// Display text of one token (for token views); not necessarily decode({id}).
  virtual std::string token_text(int32_t id) const = 0;
  virtual int32_t vocab_size() const = 0;
};

/// Loads the tokenizer of a model. `path` may be a tokenizer.json, a SentencePiece .model, a
/// llama2.c tok*.bin, or a model directory (tokenizer.json, then tokenizer.model, then tok*.bin).
/// Throws InputError naming the file on a missing or malformed file.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path);

/// Byte-level BPE from a Hugging Face tokenizer.json. Throws InputError(path, ...), also for a
/// malformed model (vocab, merges, unk_token, options: checked at load, not left to encode).
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::filesystem::path& tokenizer_json);
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
