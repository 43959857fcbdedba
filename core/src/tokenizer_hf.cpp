// Hugging Face tokenizer.json with a BPE model: the byte-level form (GPT-2, Llama-3, Qwen2,
// pycode-16m) and the SentencePiece-converted form (Llama-2, Mistral: byte_fallback, Metaspace or
// Prepend+Replace normalizers). Follows the `tokenizers` pipeline: added tokens are split off
// first, then normalizer, pre-tokenizer, BPE model; decode runs the decoder chain.
//
// Sections, in order (each under a banner "// ---...--- / // NAME / // ---...---"):
//   UTF-8                               well-formedness, code point decoding
//   GPT-2 byte <-> unicode alphabet     the byte-level alphabet
//   PCRE2 regex                         compiled once at load; per-call match data
//   Split behaviours                    SplitDelimiterBehavior of `tokenizers`
//   Normalizers                         Sequence, Prepend, Replace, NFC; parse_normalizer
//   Pre-tokenizers                      Sequence, Split, ByteLevel, Digits, Metaspace; parse_pre_tokenizer
//   Decoders                            Sequence, ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace
//   BPE model                           MergeRule, BpeModel (merges, byte fallback)
//   Added tokens                        AddedToken, AddedTokenMatcher (split off before the normalizer)
//   The tokenizer                       HfTokenizer; load_hf_tokenizer, load_hf_tokenizer_text
// The post-processor (special tokens around a sequence) is tokenizer_post_processor.cpp; the
// adjustments transformers makes from tokenizer_config.json are tokenizer_transformers.cpp.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <memory>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "json_integers.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/tokenizer.h"
#include "kvscope/core/utf8.h"
#include "text_file.h"
#include "tokenizer_hf.h"
#include "tokenizer_nfc.h"
#include "tokenizer_post_processor.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ------------------------------------------------------------------------------------------------
// UTF-8
// ------------------------------------------------------------------------------------------------

/// Byte length of the character at text[pos]; an invalid byte counts as a character of its own.
size_t char_length(std::string_view text, size_t pos) { return std::max<size_t>(1, valid_utf8_length(text, pos)); }

std::string byte_token_name(unsigned char byte) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  return std::string("<0x") + kHex[byte >> 4] + kHex[byte & 0xF] + ">";
}

/// `text` with every byte that is not part of a well-formed UTF-8 character written as <0xNN>.
std::string escape_invalid_utf8(std::string_view text) {
  std::string out;
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = valid_utf8_length(text, pos);
    if (len == 0) {
      out += byte_token_name(static_cast<unsigned char>(text[pos]));
      ++pos;
    } else {
      out.append(text.substr(pos, len));
      pos += len;
    }
  }
  return out;
}

/// Parses a "<0xNN>" byte token (exactly six characters, as the `tokenizers` ByteFallback does).
std::optional<unsigned char> parse_byte_token(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return std::nullopt;
  int value = 0;
  for (char c : token.substr(3, 2)) {
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    if (digit < 0) return std::nullopt;
    value = value * 16 + digit;
  }
  return static_cast<unsigned char>(value);
}

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = text.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(text, pos, hit - pos);
    out.append(to);
  }
  out.append(text, pos, std::string::npos);
  text = std::move(out);
}

// ------------------------------------------------------------------------------------------------
// GPT-2 byte <-> unicode alphabet
// ------------------------------------------------------------------------------------------------

/// The GPT-2 byte-level alphabet: printable bytes stand for themselves, the other 68 bytes map to
/// U+0100 upwards in byte order (so ' ' is 'Ġ' U+0120 and '\n' is 'Ċ' U+010A).
struct ByteAlphabet {
  static constexpr char32_t kMaxCodePoint = 0x100 + 68;
  std::array<std::string, 256> byte_to_text;                // UTF-8 of each byte's stand-in
  std::array<int16_t, kMaxCodePoint> code_point_to_byte{};  // -1 where not a stand-in

  ByteAlphabet() {
    code_point_to_byte.fill(-1);
    char32_t next_extra = 0x100;
    for (int byte = 0; byte < 256; ++byte) {
      const bool printable =
          (byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF);
      const char32_t cp = printable ? static_cast<char32_t>(byte) : next_extra++;
      append_utf8(byte_to_text[byte], cp);
      code_point_to_byte[cp] = static_cast<int16_t>(byte);
    }
  }

  std::string encode(std::string_view text) const {
    std::string out;
    out.reserve(text.size() * 2);
    for (char c : text) out += byte_to_text[static_cast<unsigned char>(c)];
    return out;
  }

  /// The bytes `token` stands for, or nullopt if a character of it is not in the alphabet.
  std::optional<std::string> decode(std::string_view token) const {
    std::string out;
    for (size_t pos = 0; pos < token.size();) {
      const size_t len = valid_utf8_length(token, pos);
      if (len == 0) return std::nullopt;
      const char32_t cp = decode_code_point(token, pos, len);
      if (cp >= kMaxCodePoint || code_point_to_byte[cp] < 0) return std::nullopt;
      out += static_cast<char>(code_point_to_byte[cp]);
      pos += len;
    }
    return out;
  }
};

// ------------------------------------------------------------------------------------------------
// PCRE2 regex (compiled once at load; match data is per call, so matching is thread-safe)
// ------------------------------------------------------------------------------------------------

/// Rewrites an Oniguruma pattern for PCRE2: Oniguruma's Unicode \s is the White_Space property,
/// which also holds U+0085; PCRE2's UCP \s does not, so \s and \S are widened by it.
std::string adapt_oniguruma_pattern(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (next == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else {
        out += c;
        out += next;
      }
      continue;
    }
    out += c;
    if (!in_class && c == '[') {
      in_class = true;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
    } else if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const size_t close = pattern.find(":]", i + 2);
      if (close != std::string_view::npos) {
        out.append(pattern.substr(i + 1, close + 2 - (i + 1)));
        i = close + 1;
      }
    } else if (in_class && c == ']') {
      in_class = false;
    }
  }
  return out;
}

struct CodeDeleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

using ByteRange = std::pair<size_t, size_t>;  // [begin, end) in bytes

class Regex {
 public:
  /// Compiles `pattern` (Oniguruma syntax as in tokenizer.json) in UTF + UCP mode with JIT.
  /// Throws InputError(file, ...) if it does not compile.
  Regex(std::string_view pattern, const fs::path& file) : file_(file) {
    const std::string adapted = adapt_oniguruma_pattern(pattern);
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    code_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(adapted.data()), adapted.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &error_offset, nullptr));
    if (!code_) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(error, message.data(), message.size());
      throw InputError(file, "invalid regex '" + std::string(pattern) + "' at offset " + std::to_string(error_offset) +
                                 ": " + reinterpret_cast<const char*>(message.data()));
    }
    pcre2_jit_compile(code_.get(), PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
  }

  /// Every non-empty, non-overlapping match, left to right (empty matches are skipped).
  /// Throws InputError(file, ...) if PCRE2 gives up (match or heap limit).
  std::vector<ByteRange> find_all(std::string_view text) const {
    std::unique_ptr<pcre2_match_data, MatchDataDeleter> data(
        pcre2_match_data_create_from_pattern(code_.get(), nullptr));
    std::vector<ByteRange> matches;
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t offset = 0;
    while (offset <= text.size()) {
      int rc = pcre2_match(code_.get(), subject, text.size(), offset, 0, data.get(), nullptr);
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        rc = pcre2_match(code_.get(), subject, text.size(), offset, PCRE2_NO_JIT, data.get(), nullptr);
      }
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) throw InputError(file_, "regex match failed with PCRE2 error " + std::to_string(rc));
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
      const size_t begin = ovector[0];
      const size_t end = ovector[1];
      if (end > begin) {
        matches.emplace_back(begin, end);
        offset = end;
      } else {
        if (begin >= text.size()) break;
        offset = begin + char_length(text, begin);
      }
    }
    return matches;
  }

 private:
  fs::path file_;
  std::unique_ptr<pcre2_code, CodeDeleter> code_;
};

/// A Split / Replace pattern: {"String": ...} (literal) or {"Regex": ...}.
class Pattern {
 public:
  Pattern(const json& spec, const fs::path& file) {
    if (spec.contains("Regex")) {
      regex_ = std::make_unique<Regex>(spec.at("Regex").get<std::string>(), file);
    } else if (spec.contains("String")) {
      literal_ = spec.at("String").get<std::string>();
    } else {
      throw InputError(file, "pattern needs a 'String' or 'Regex' key: " + spec.dump());
    }
  }

  std::vector<ByteRange> find_all(std::string_view text) const {
    if (regex_) return regex_->find_all(text);
    std::vector<ByteRange> matches;
    if (literal_.empty()) return matches;
    for (size_t hit = text.find(literal_); hit != std::string_view::npos;
         hit = text.find(literal_, hit + literal_.size())) {
      matches.emplace_back(hit, hit + literal_.size());
    }
    return matches;
  }

 private:
  std::unique_ptr<Regex> regex_;
  std::string literal_;
};

void replace_matches(std::string& text, const Pattern& pattern, std::string_view content) {
  const auto matches = pattern.find_all(text);
  if (matches.empty()) return;
  std::string out;
  size_t pos = 0;
  for (const auto& [begin, end] : matches) {
    out.append(text, pos, begin - pos);
    out.append(content);
    pos = end;
  }
  out.append(text, pos, std::string::npos);
  text = std::move(out);
}

// ------------------------------------------------------------------------------------------------
// Split behaviours (SplitDelimiterBehavior of `tokenizers`)
// ------------------------------------------------------------------------------------------------

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Span {
  size_t begin;
  size_t end;
  bool is_match;
};

/// Covers [0, size) with the matches and the gaps between them (flags flipped if `invert`).
std::vector<Span> spans_of(size_t size, const std::vector<ByteRange>& matches, bool invert) {
  std::vector<Span> spans;
  size_t pos = 0;
  for (const auto& [begin, end] : matches) {
    if (begin > pos) spans.push_back({pos, begin, invert});
    spans.push_back({begin, end, !invert});
    pos = end;
  }
  if (pos < size) spans.push_back({pos, size, invert});
  return spans;
}

/// Joins a match onto the piece before it (`forward`) or after it, as the `tokenizers` folds do.
std::vector<Span> merge_matches(std::vector<Span> spans, bool with_previous) {
  if (!with_previous) std::reverse(spans.begin(), spans.end());
  std::vector<Span> out;
  bool previous_match = false;
  for (const Span& span : spans) {
    if (span.is_match && !previous_match && !out.empty()) {
      if (with_previous) {
        out.back().end = span.end;
      } else {
        out.back().begin = span.begin;
      }
    } else {
      out.push_back(span);
    }
    previous_match = span.is_match;
  }
  if (!with_previous) std::reverse(out.begin(), out.end());
  return out;
}

std::vector<ByteRange> apply_behavior(std::vector<Span> spans, SplitBehavior behavior) {
  switch (behavior) {
    case SplitBehavior::kRemoved:
      std::erase_if(spans, [](const Span& s) { return s.is_match; });
      break;
    case SplitBehavior::kIsolated:
      break;
    case SplitBehavior::kMergedWithPrevious:
      spans = merge_matches(std::move(spans), true);
      break;
    case SplitBehavior::kMergedWithNext:
      spans = merge_matches(std::move(spans), false);
      break;
    case SplitBehavior::kContiguous: {
      std::vector<Span> out;
      for (const Span& span : spans) {
        if (!out.empty() && out.back().is_match == span.is_match) {
          out.back().end = span.end;
        } else {
          out.push_back(span);
        }
      }
      spans = std::move(out);
      break;
    }
  }
  std::vector<ByteRange> ranges;
  for (const Span& s : spans) {
    if (s.end > s.begin) ranges.emplace_back(s.begin, s.end);
  }
  return ranges;
}

SplitBehavior parse_behavior(const std::string& name, const fs::path& file) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  throw InputError(file, "unsupported split behavior '" + name + "'");
}

// ------------------------------------------------------------------------------------------------
// Normalizers
// ------------------------------------------------------------------------------------------------

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void apply(std::string& text) const = 0;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void apply(std::string& text) const override {
    for (const auto& step : steps_) step->apply(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void apply(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(const json& spec, const fs::path& file)
      : pattern_(spec.at("pattern"), file), content_(spec.at("content").get<std::string>()) {}
  void apply(std::string& text) const override { replace_matches(text, pattern_, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

/// Unicode NFC (tokenizer_nfc.cpp).
class NfcNormalizer final : public Normalizer {
 public:
  void apply(std::string& text) const override { text = to_nfc(text); }
};

std::unique_ptr<Normalizer> parse_normalizer(const json& spec, const fs::path& file) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.at("type").get<std::string>();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const json& step : spec.at("normalizers")) {
      if (auto parsed = parse_normalizer(step, file)) steps.push_back(std::move(parsed));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(spec.at("prepend").get<std::string>());
  if (type == "Replace") return std::make_unique<ReplaceNormalizer>(spec, file);
  if (type == "NFC") return std::make_unique<NfcNormalizer>();
  throw InputError(file, "unsupported normalizer '" + type + "'");
}

// ------------------------------------------------------------------------------------------------
// Pre-tokenizers
// ------------------------------------------------------------------------------------------------

/// A piece of text on its way to the model. `at_start`: it begins at offset 0 of the input
/// (Metaspace's prepend_scheme "first" needs this).
struct Piece {
  std::string text;
  bool at_start;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void apply(std::vector<Piece>& pieces) const = 0;
};

/// Replaces each piece by the sub-ranges `split(piece.text)` returns.
template <typename SplitFn>
void split_pieces(std::vector<Piece>& pieces, const SplitFn& split) {
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (Piece& piece : pieces) {
    for (const auto& [begin, end] : split(piece.text)) {
      out.push_back({piece.text.substr(begin, end - begin), piece.at_start && begin == 0});
    }
  }
  pieces = std::move(out);
}

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void apply(std::vector<Piece>& pieces) const override {
    for (const auto& step : steps_) step->apply(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(const json& spec, const fs::path& file)
      : pattern_(spec.at("pattern"), file),
        behavior_(parse_behavior(spec.at("behavior").get<std::string>(), file)),
        invert_(spec.value("invert", false)) {}
  void apply(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, [&](const std::string& text) {
      return apply_behavior(spans_of(text.size(), pattern_.find_all(text), invert_), behavior_);
    });
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(const json& spec, const fs::path& file, std::shared_ptr<const ByteAlphabet> alphabet)
      : add_prefix_space_(spec.value("add_prefix_space", true)), alphabet_(std::move(alphabet)) {
    if (spec.value("use_regex", true)) regex_ = std::make_unique<Regex>(kGpt2Pattern, file);
  }
  void apply(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_) {
      for (Piece& piece : pieces) {
        if (piece.text.empty() || piece.text.front() != ' ') piece.text.insert(0, " ");
      }
    }
    if (regex_) {
      split_pieces(pieces, [&](const std::string& text) {
        return apply_behavior(spans_of(text.size(), regex_->find_all(text), false), SplitBehavior::kIsolated);
      });
    }
    for (Piece& piece : pieces) piece.text = alphabet_->encode(piece.text);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
  std::shared_ptr<const ByteAlphabet> alphabet_;
};

/// Digits: every numeric character alone, or runs of them (Contiguous == one match per run).
class DigitsPreTokenizer final : public PreTokenizer {
 public:
  DigitsPreTokenizer(const json& spec, const fs::path& file)
      : regex_(spec.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)", file) {}
  void apply(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, [&](const std::string& text) {
      return apply_behavior(spans_of(text.size(), regex_.find_all(text), false), SplitBehavior::kIsolated);
    });
  }

 private:
  Regex regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

PrependScheme parse_prepend_scheme(const json& spec, const fs::path& file) {
  if (spec.contains("prepend_scheme") && !spec.at("prepend_scheme").is_null()) {
    const std::string name = spec.at("prepend_scheme").get<std::string>();
    if (name == "always") return PrependScheme::kAlways;
    if (name == "first") return PrependScheme::kFirst;
    if (name == "never") return PrependScheme::kNever;
    throw InputError(file, "unsupported Metaspace prepend_scheme '" + name + "'");
  }
  return spec.value("add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
}

std::string metaspace_replacement(const json& spec) {
  if (spec.contains("replacement")) return spec.at("replacement").get<std::string>();
  return "\xE2\x96\x81";  // U+2581 '▁'
}

/// Metaspace: ' ' -> '▁', optional leading '▁', then split before each '▁'.
class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(const json& spec, const fs::path& file)
      : replacement_(metaspace_replacement(spec)),
        scheme_(parse_prepend_scheme(spec, file)),
        split_(spec.value("split", true)) {}
  void apply(std::vector<Piece>& pieces) const override {
    for (Piece& piece : pieces) {
      replace_all(piece.text, " ", replacement_);
      const bool prepend = scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && piece.at_start);
      if (prepend && !piece.text.starts_with(replacement_)) piece.text.insert(0, replacement_);
    }
    if (!split_) return;
    split_pieces(pieces, [&](const std::string& text) {
      std::vector<ByteRange> matches;
      for (size_t hit = text.find(replacement_); hit != std::string::npos;
           hit = text.find(replacement_, hit + replacement_.size())) {
        matches.emplace_back(hit, hit + replacement_.size());
      }
      return apply_behavior(spans_of(text.size(), matches, false), SplitBehavior::kMergedWithNext);
    });
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const json& spec, const fs::path& file,
                                                  const std::shared_ptr<const ByteAlphabet>& alphabet) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.at("type").get<std::string>();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const json& step : spec.at("pretokenizers")) {
      if (auto parsed = parse_pre_tokenizer(step, file, alphabet)) steps.push_back(std::move(parsed));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  if (type == "Split") return std::make_unique<SplitPreTokenizer>(spec, file);
  if (type == "ByteLevel") return std::make_unique<ByteLevelPreTokenizer>(spec, file, alphabet);
  if (type == "Digits") return std::make_unique<DigitsPreTokenizer>(spec, file);
  if (type == "Metaspace") return std::make_unique<MetaspacePreTokenizer>(spec, file);
  throw InputError(file, "unsupported pre-tokenizer '" + type + "'");
}

// ------------------------------------------------------------------------------------------------
// Decoders (each maps the list of token strings to a new list; the result is joined)
// ------------------------------------------------------------------------------------------------

/// kText: decode(). kDisplay: token_text() of one token (no stripping of a leading space).
enum class DecodeMode { kText, kDisplay };

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void apply(std::vector<std::string>& tokens, DecodeMode mode) const = 0;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void apply(std::vector<std::string>& tokens, DecodeMode mode) const override {
    for (const auto& step : steps_) step->apply(tokens, mode);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

/// Maps each token's characters back to bytes (a token with a character outside the alphabet,
/// e.g. an added token, is kept as it is) and fuses everything into one string.
class ByteLevelDecoder final : public Decoder {
 public:
  explicit ByteLevelDecoder(std::shared_ptr<const ByteAlphabet> alphabet) : alphabet_(std::move(alphabet)) {}
  void apply(std::vector<std::string>& tokens, DecodeMode) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      const auto decoded = alphabet_->decode(token);
      bytes += decoded ? *decoded : token;
    }
    tokens.assign(1, std::move(bytes));
  }

 private:
  std::shared_ptr<const ByteAlphabet> alphabet_;
};

/// Runs of <0xNN> tokens become their raw bytes (invalid UTF-8 is kept as bytes, not U+FFFD).
class ByteFallbackDecoder final : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens, DecodeMode) const override {
    std::vector<std::string> out;
    std::string pending_bytes;
    for (std::string& token : tokens) {
      if (const auto byte = parse_byte_token(token)) {
        pending_bytes += static_cast<char>(*byte);
        continue;
      }
      if (!pending_bytes.empty()) out.push_back(std::exchange(pending_bytes, {}));
      out.push_back(std::move(token));
    }
    if (!pending_bytes.empty()) out.push_back(std::move(pending_bytes));
    tokens = std::move(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens, DecodeMode) const override {
    std::string joined;
    for (const std::string& token : tokens) joined += token;
    tokens.assign(1, std::move(joined));
  }
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(const json& spec, const fs::path& file)
      : pattern_(spec.at("pattern"), file), content_(spec.at("content").get<std::string>()) {}
  void apply(std::vector<std::string>& tokens, DecodeMode) const override {
    for (std::string& token : tokens) replace_matches(token, pattern_, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

/// Strips up to `start` leading and `stop` trailing `content` characters of each token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(const json& spec, const fs::path& file)
      : content_(spec.at("content").get<std::string>()),
        start_(count(spec, "start", file)),
        stop_(count(spec, "stop", file)) {
    if (content_.empty()) throw InputError(file, "Strip decoder with an empty 'content'");
  }
  /// `spec[key]` (0 if absent) as a count of characters; a float, a negative number or one past
  /// 2^31 is refused (nlohmann's get<size_t> cast 1.9e19 to an integer: undefined behaviour).
  static size_t count(const json& spec, const char* key, const fs::path& file) {
    if (!spec.contains(key)) return 0;
    const auto v = json_integer(spec.at(key), 0, INT32_MAX);
    if (!v) throw InputError(file, std::string("Strip decoder '") + key + "' must be an integer in [0, 2^31)");
    return static_cast<size_t>(*v);
  }
  void apply(std::vector<std::string>& tokens, DecodeMode mode) const override {
    if (mode == DecodeMode::kDisplay) return;
    for (std::string& token : tokens) {
      std::string_view view = token;
      for (size_t i = 0; i < start_ && view.starts_with(content_); ++i) view.remove_prefix(content_.size());
      for (size_t i = 0; i < stop_ && view.ends_with(content_); ++i) view.remove_suffix(content_.size());
      token = std::string(view);
    }
  }

 private:
  std::string content_;
  size_t start_;
  size_t stop_;
};

/// '▁' -> ' '; in the first token (unless prepend_scheme is "never") every '▁' is dropped.
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(const json& spec, const fs::path& file)
      : replacement_(metaspace_replacement(spec)), scheme_(parse_prepend_scheme(spec, file)) {}
  void apply(std::vector<std::string>& tokens, DecodeMode mode) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const bool drop = i == 0 && scheme_ != PrependScheme::kNever && mode == DecodeMode::kText;
      replace_all(tokens[i], replacement_, drop ? "" : " ");
    }
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
};

std::unique_ptr<Decoder> parse_decoder(const json& spec, const fs::path& file,
                                       const std::shared_ptr<const ByteAlphabet>& alphabet) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.at("type").get<std::string>();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const json& step : spec.at("decoders")) {
      if (auto parsed = parse_decoder(step, file, alphabet)) steps.push_back(std::move(parsed));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>(alphabet);
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(spec, file);
  if (type == "Strip") return std::make_unique<StripDecoder>(spec, file);
  if (type == "Metaspace") return std::make_unique<MetaspaceDecoder>(spec, file);
  throw InputError(file, "unsupported decoder '" + type + "'");
}

// ------------------------------------------------------------------------------------------------
// BPE model
// ------------------------------------------------------------------------------------------------

using WordCache = std::unordered_map<std::string, std::vector<int32_t>>;

struct MergeRule {
  int32_t rank;
  int32_t new_id;
};

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

/// model.<key> as a string; nullopt when absent or null. Throws InputError(file, ...) for another type.
std::optional<std::string> optional_string(const json& spec, const char* key, const fs::path& file) {
  if (!spec.contains(key) || spec.at(key).is_null()) return std::nullopt;
  if (!spec.at(key).is_string())
    throw InputError(file,
                     std::string("model.") + key + " must be a string or null (got " + spec.at(key).type_name() + ")");
  return spec.at(key).get<std::string>();
}

/// model.<key> as a bool; `fallback` when absent or null. Throws InputError(file, ...) for another type.
bool optional_bool(const json& spec, const char* key, bool fallback, const fs::path& file) {
  if (!spec.contains(key) || spec.at(key).is_null()) return fallback;
  if (!spec.at(key).is_boolean())
    throw InputError(file,
                     std::string("model.") + key + " must be true or false (got " + spec.at(key).type_name() + ")");
  return spec.at(key).get<bool>();
}

/// A JSON value for an error message: its text, cut to 60 characters.
std::string shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

constexpr const char* kSupportedModels = "supported: BPE";

class BpeModel {
 public:
  /// Reads model.vocab / model.merges (either "a b" strings or ["a", "b"] pairs) and options.
  /// Throws InputError(file, ...) naming the field for a model that is not an object, another
  /// model type, a vocab that is not a non-empty object of token -> distinct non-negative ids,
  /// merges that are not an array of pairs of vocabulary tokens, or an option of the wrong type.
  /// An unk_token outside the vocabulary loads (as in Hugging Face) and fails the encode that needs it.
  BpeModel(const json& spec, const fs::path& file) {
    if (!spec.is_object())
      throw InputError(file,
                       std::string("model must be an object with \"type\": \"BPE\", \"vocab\" and \"merges\" (got ") +
                           spec.type_name() + ")");
    std::string type = "BPE";  // tokenizer.json files written before `tokenizers` 0.9 have no type
    if (spec.contains("type")) {
      if (!spec.at("type").is_string())
        throw InputError(
            file, std::string("model.type must be a string (") + kSupportedModels + "), got " + shown(spec.at("type")));
      type = spec.at("type").get<std::string>();
    }
    if (type != "BPE") throw InputError(file, "unsupported model type '" + type + "' (" + kSupportedModels + ")");
    read_vocab(spec, file);
    read_merges(spec.contains("merges") ? spec.at("merges") : json(), file);
    if (const auto unk = optional_string(spec, "unk_token", file)) {
      // As in Hugging Face tokenizers: an unk_token outside the vocabulary is an error only when a
      // text needs it (encode throws then), not at load.
      if (const auto it = vocab_.find(*unk); it != vocab_.end())
        unk_id_ = it->second;
      else
        missing_unk_ = *unk;
    }
    file_ = file;
    fuse_unk_ = optional_bool(spec, "fuse_unk", false, file);
    byte_fallback_ = optional_bool(spec, "byte_fallback", false, file);
    ignore_merges_ = optional_bool(spec, "ignore_merges", false, file);
    continuing_prefix_ = optional_string(spec, "continuing_subword_prefix", file).value_or("");
    end_of_word_suffix_ = optional_string(spec, "end_of_word_suffix", file).value_or("");
    byte_ids_.fill(-1);
    for (int byte = 0; byte < 256; ++byte) {
      if (const auto it = vocab_.find(byte_token_name(static_cast<unsigned char>(byte))); it != vocab_.end()) {
        byte_ids_[byte] = it->second;
      }
    }
  }

  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }

  /// Appends the ids of one pre-token (memoized in `cache`).
  void encode_word(const std::string& word, WordCache& cache, std::vector<int32_t>& out) const {
    if (word.empty()) return;
    if (ignore_merges_) {
      if (const auto it = vocab_.find(word); it != vocab_.end()) {
        out.push_back(it->second);
        return;
      }
    }
    auto [it, inserted] = cache.try_emplace(word);
    if (inserted) it->second = merge_word(initial_symbols(word));
    out.insert(out.end(), it->second.begin(), it->second.end());
  }

 private:
  /// model.vocab: a non-empty object of token -> id, ids distinct and >= 0 (an id shared by two
  /// tokens would make decoding depend on hash order; the upper bound is checked with the added
  /// tokens, HfTokenizer::set_token).
  void read_vocab(const json& spec, const fs::path& file) {
    if (!spec.contains("vocab")) throw InputError(file, "model.vocab is missing (an object of token -> id)");
    const json& vocab = spec.at("vocab");
    if (!vocab.is_object())
      throw InputError(file, std::string("model.vocab must be an object of token -> id (got ") + vocab.type_name() +
                                 " " + shown(vocab) + ")");
    if (vocab.empty()) throw InputError(file, "model.vocab is empty: no text could be encoded");
    std::vector<std::pair<int32_t, const std::string*>> token_of;  // sorted below to find a shared id
    token_of.reserve(vocab.size());
    vocab_.reserve(vocab.size());
    for (const auto& [token, id] : vocab.items()) {
      const auto value = json_integer(id, INT32_MIN, INT32_MAX);
      if (!value)
        throw InputError(file, "model.vocab entry '" + token + "' has id " + id.dump() + ", not a 32-bit integer");
      if (*value < 0) throw InputError(file, "model.vocab entry '" + token + "' has negative id " + id.dump());
      token_of.emplace_back(static_cast<int32_t>(*value), &token);
      vocab_.emplace(token, static_cast<int32_t>(*value));
    }
    std::stable_sort(token_of.begin(), token_of.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });  // by id, then as listed
    for (size_t i = 1; i < token_of.size(); ++i) {
      if (token_of[i].first == token_of[i - 1].first)
        throw InputError(file, "model.vocab entries '" + *token_of[i - 1].second + "' and '" + *token_of[i].second +
                                   "' have the same id " + std::to_string(token_of[i].first));
    }
  }

  /// model.merges: absent, null, or an array whose entries are "a b" strings or ["a", "b"] pairs of
  /// vocabulary tokens whose concatenation is in the vocabulary too.
  void read_merges(const json& merges, const fs::path& file) {
    if (merges.is_null()) return;
    if (!merges.is_array())
      throw InputError(file,
                       std::string("model.merges must be an array of \"a b\" strings or [\"a\", \"b\"] pairs (got ") +
                           merges.type_name() + " " + shown(merges) + ")");
    int32_t rank = 0;
    merges_.reserve(merges.size());
    for (const json& merge : merges) {
      const std::string where = "model.merges[" + std::to_string(rank) + "]";
      std::string left;
      std::string right;
      if (merge.is_string()) {
        const std::string line = merge.get<std::string>();
        const size_t space = line.find(' ');
        if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
          throw InputError(file, where + ": merge '" + line + "' is not two tokens separated by one space");
        }
        left = line.substr(0, space);
        right = line.substr(space + 1);
      } else {
        if (!merge.is_array() || merge.size() != 2 || !merge[0].is_string() || !merge[1].is_string())
          throw InputError(file, where + " must be an \"a b\" string or a pair [\"a\", \"b\"] of token strings (got " +
                                     shown(merge) + ")");
        left = merge[0].get<std::string>();
        right = merge[1].get<std::string>();
      }
      const int32_t left_id = id_of(left, where + ": merge token", file);
      const int32_t right_id = id_of(right, where + ": merge token", file);
      const int32_t merged_id = id_of(left + right, where + ": merged token", file);
      merges_.emplace(pair_key(left_id, right_id), MergeRule{rank++, merged_id});
    }
  }

  int32_t id_of(const std::string& token, const std::string& what, const fs::path& file) const {
    const auto it = vocab_.find(token);
    if (it == vocab_.end()) throw InputError(file, what + " '" + token + "' is not in the vocabulary");
    return it->second;
  }

  /// One symbol per character (with continuing-subword prefix / end-of-word suffix); characters
  /// outside the vocabulary become <0xNN> byte tokens (byte_fallback) or the unknown token.
  std::vector<int32_t> initial_symbols(std::string_view word) const {
    std::vector<int32_t> symbols;
    std::optional<int32_t> pending_unk;
    for (size_t pos = 0; pos < word.size();) {
      const size_t len = char_length(word, pos);
      std::string piece(word.substr(pos, len));
      if (pos > 0) piece.insert(0, continuing_prefix_);
      pos += len;
      if (pos == word.size()) piece += end_of_word_suffix_;
      if (const auto it = vocab_.find(piece); it != vocab_.end()) {
        if (pending_unk) symbols.push_back(*std::exchange(pending_unk, std::nullopt));
        symbols.push_back(it->second);
      } else if (!append_byte_fallback(piece, symbols) && unk_id_) {
        if (pending_unk && !fuse_unk_) symbols.push_back(*pending_unk);
        pending_unk = *unk_id_;
      } else if (missing_unk_ && !byte_fallback_) {
        throw InputError(file_, "model.unk_token '" + *missing_unk_ + "' is not in model.vocab, and the text has '" +
                                    piece + "', which only the unknown token could stand for");
      }
    }
    if (pending_unk) symbols.push_back(*pending_unk);
    return symbols;
  }

  bool append_byte_fallback(std::string_view piece, std::vector<int32_t>& symbols) const {
    if (!byte_fallback_) return false;
    for (char c : piece) {
      if (byte_ids_[static_cast<unsigned char>(c)] < 0) return false;
    }
    for (char c : piece) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
    return true;
  }

  const MergeRule* find_merge(int32_t left, int32_t right) const {
    const auto it = merges_.find(pair_key(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  }

  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  struct QueuedMerge {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator<(const QueuedMerge& other) const {  // priority_queue top = lowest rank, leftmost
      return rank != other.rank ? rank > other.rank : pos > other.pos;
    }
  };

  /// Applies merges lowest rank first (leftmost among equal ranks), like `tokenizers` Word::merge_all.
  std::vector<int32_t> merge_word(const std::vector<int32_t>& ids) const {
    const auto n = static_cast<int32_t>(ids.size());
    std::vector<Symbol> symbols(ids.size());
    std::priority_queue<QueuedMerge> queue;
    for (int32_t i = 0; i < n; ++i) {
      symbols[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, true};
      if (i > 0) push_merge(queue, symbols, i - 1);
    }
    while (!queue.empty()) {
      const QueuedMerge top = queue.top();
      queue.pop();
      Symbol& left = symbols[top.pos];
      if (!left.alive || left.next < 0) continue;
      const MergeRule* rule = find_merge(left.id, symbols[left.next].id);
      if (rule == nullptr || rule->new_id != top.new_id) continue;  // stale entry
      Symbol& right = symbols[left.next];
      left.id = top.new_id;
      right.alive = false;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = top.pos;
      if (left.prev >= 0) push_merge(queue, symbols, left.prev);
      if (left.next >= 0) push_merge(queue, symbols, top.pos);
    }
    std::vector<int32_t> out;
    for (const Symbol& s : symbols) {
      if (s.alive) out.push_back(s.id);
    }
    return out;
  }

  void push_merge(std::priority_queue<QueuedMerge>& queue, const std::vector<Symbol>& symbols, int32_t pos) const {
    const Symbol& left = symbols[pos];
    if (const MergeRule* rule = find_merge(left.id, symbols[left.next].id)) {
      queue.push({rule->rank, pos, rule->new_id});
    }
  }

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, MergeRule> merges_;
  std::array<int32_t, 256> byte_ids_{};
  std::optional<int32_t> unk_id_;
  std::optional<std::string> missing_unk_;  ///< an unk_token outside the vocabulary (an error once needed)
  fs::path file_;                           ///< tokenizer.json, for that error
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_prefix_;
  std::string end_of_word_suffix_;
};

// ------------------------------------------------------------------------------------------------
// Added tokens
// ------------------------------------------------------------------------------------------------

struct AddedToken {
  std::string content;
  int32_t id;
  bool lstrip;
  bool rstrip;
  bool single_word;
  bool normalized;
};

/// A stretch of input: an added token (token_id >= 0) or text for the rest of the pipeline.
struct Segment {
  std::string_view text;
  int32_t token_id;
  bool at_start;
};

bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
bool is_word_byte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || std::isalnum(u) || c == '_';
}

/// Splits text on added tokens, leftmost-longest (as the `tokenizers` Aho-Corasick matcher): a
/// byte trie of the tokens, walked from each position of the text. A single_word token that is not
/// a word of its own is discarded with the text it matched, as `tokenizers` does.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() { nodes_.emplace_back(); }

  /// Adds a token (the first of several with the same content wins); call finish() after the last.
  void add(AddedToken token) {
    if (token.content.empty()) return;
    int32_t node = 0;
    for (char c : token.content) {
      const auto byte = static_cast<unsigned char>(c);
      int32_t child = root_children_[byte];
      if (node != 0) {  // children are sorted only by finish(): search them in order
        const auto& children = nodes_[node].children;
        const auto it =
            std::find_if(children.begin(), children.end(), [&](const auto& entry) { return entry.first == byte; });
        child = it == children.end() ? -1 : it->second;
      }
      if (child < 0) {
        child = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
        if (node == 0) {
          root_children_[byte] = child;
        } else {
          nodes_[node].children.emplace_back(byte, child);
        }
      }
      node = child;
    }
    if (nodes_[node].token < 0) {
      nodes_[node].token = static_cast<int32_t>(tokens_.size());
      tokens_.push_back(std::move(token));
    }
  }

  /// Sorts the children of each node for binary search.
  void finish() {
    for (Node& node : nodes_) std::sort(node.children.begin(), node.children.end());
  }

  std::vector<Segment> split(std::string_view text, bool at_start) const {
    std::vector<Segment> segments;
    size_t text_begin = 0;
    for (size_t pos = 0; !tokens_.empty() && pos < text.size();) {
      size_t length = 0;
      const AddedToken* token = longest_at(text, pos, length);
      if (token == nullptr) {
        ++pos;
        continue;
      }
      if (token->single_word && !is_single_word(text, pos, pos + length)) {
        pos += length;  // the match is dropped, and its text stays plain text
        continue;
      }
      size_t begin = pos;
      size_t end = pos + length;
      if (token->lstrip) {
        while (begin > text_begin && is_ascii_space(text[begin - 1])) --begin;
      }
      if (token->rstrip) {
        while (end < text.size() && is_ascii_space(text[end])) ++end;
      }
      if (begin > text_begin) {
        segments.push_back({text.substr(text_begin, begin - text_begin), -1, at_start && text_begin == 0});
      }
      segments.push_back({text.substr(begin, end - begin), token->id, false});
      text_begin = pos = end;
    }
    if (text_begin < text.size()) {
      segments.push_back({text.substr(text_begin), -1, at_start && text_begin == 0});
    }
    return segments;
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte after finish()
    int32_t token = -1;                                       // index into tokens_ of the token ending here
  };

  int32_t find_child(int32_t node, unsigned char byte) const {
    const auto& children = nodes_[node].children;
    const auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, INT32_MIN));
    return it != children.end() && it->first == byte ? it->second : -1;
  }

  /// The longest token that starts at text[pos] (its byte length in `length`), or nullptr.
  const AddedToken* longest_at(std::string_view text, size_t pos, size_t& length) const {
    const AddedToken* found = nullptr;
    int32_t node = root_children_[static_cast<unsigned char>(text[pos])];
    for (size_t i = pos + 1; node >= 0; ++i) {
      if (nodes_[node].token >= 0) {
        found = &tokens_[nodes_[node].token];
        length = i - pos;
      }
      if (i == text.size()) break;
      node = find_child(node, static_cast<unsigned char>(text[i]));
    }
    return found;
  }

  static bool is_single_word(std::string_view text, size_t begin, size_t end) {
    const bool free_before = begin == 0 || !is_word_byte(text[begin - 1]);
    const bool free_after = end == text.size() || !is_word_byte(text[end]);
    return free_before && free_after;
  }

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;  // nodes_[0] is the root; its children are in root_children_
  std::array<int32_t, 256> root_children_ = filled_minus_one();

  static std::array<int32_t, 256> filled_minus_one() {
    std::array<int32_t, 256> a{};
    a.fill(-1);
    return a;
  }
};

// ------------------------------------------------------------------------------------------------
// The tokenizer
// ------------------------------------------------------------------------------------------------

constexpr int32_t kMaxTokenId = 1 << 22;

/// root["model"]; InputError(file, ...) when it is missing or null (BpeModel checks the rest).
const json& model_spec(const json& root, const fs::path& file) {
  if (!root.contains("model") || root.at("model").is_null())
    throw InputError(
        file, std::string("model is missing: tokenizer.json needs a \"model\" object (") + kSupportedModels + ")");
  return root.at("model");
}

class HfTokenizer final : public Tokenizer {
 public:
  HfTokenizer(const json& root, const fs::path& file)
      : file_(file),
        alphabet_(std::make_shared<const ByteAlphabet>()),
        model_(model_spec(root, file), file),
        normalizer_(parse_normalizer(root.value("normalizer", json()), file)),
        pre_tokenizer_(parse_pre_tokenizer(root.value("pre_tokenizer", json()), file, alphabet_)),
        decoder_(parse_decoder(root.value("decoder", json()), file, alphabet_)),
        special_frame_(parse_post_processor(root.value("post_processor", json()), file)) {
    for (const auto& [token, id] : model_.vocab()) set_token(id, token);
    for (const json& spec : root.value("added_tokens", json::array())) add_token(spec);
    raw_added_.finish();
    normalized_added_.finish();
    for (const auto* ids : {&special_frame_.prefix, &special_frame_.suffix}) {
      for (int32_t id : *ids) {
        if (!is_known(id))
          throw InputError(file, "post_processor adds token id " + std::to_string(id) +
                                     ", which is neither in model.vocab nor an added token");
      }
    }
  }

  /// Added tokens, then normalizer, pre-tokenizer and BPE per piece. Throws InputError(file, ...)
  /// only if PCRE2 gives up on a pathological input (match/heap limit).
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    WordCache cache;
    for (const Segment& segment : raw_added_.split(text, true)) {
      if (segment.token_id >= 0) {
        ids.push_back(segment.token_id);
        continue;
      }
      std::string normalized(segment.text);
      if (normalizer_) normalizer_->apply(normalized);
      for (const Segment& part : normalized_added_.split(normalized, segment.at_start)) {
        if (part.token_id >= 0) {
          ids.push_back(part.token_id);
        } else {
          encode_text(part, cache, ids);
        }
      }
    }
    return ids;
  }

  /// encode(text) inside the post-processor's special tokens (e.g. BOS first).
  std::vector<int32_t> encode_with_special(std::string_view text) const override {
    std::vector<int32_t> ids = special_frame_.prefix;
    const std::vector<int32_t> body = encode(text);
    ids.insert(ids.end(), body.begin(), body.end());
    ids.insert(ids.end(), special_frame_.suffix.begin(), special_frame_.suffix.end());
    return ids;
  }

  /// Decoder chain over the tokens; special tokens give their content; ids outside the
  /// vocabulary are skipped (as `tokenizers` does). Never throws for bad ids.
  std::string decode(std::span<const int32_t> ids) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      if (is_known(id)) tokens.push_back(id_to_token_[id]);
    }
    return run_decoder(std::move(tokens), DecodeMode::kText);
  }

  /// The token through the decoder without start-of-text stripping; bytes that are not UTF-8 on
  /// their own are shown as <0xNN>. "" for an id outside the vocabulary.
  std::string token_text(int32_t id) const override {
    if (!is_known(id)) return {};
    return escape_invalid_utf8(run_decoder({id_to_token_[id]}, DecodeMode::kDisplay));
  }

  /// Highest id of the vocabulary and added tokens, plus one.
  int32_t vocab_size() const override { return static_cast<int32_t>(id_to_token_.size()); }

 private:
  void encode_text(const Segment& part, WordCache& cache, std::vector<int32_t>& ids) const {
    std::vector<Piece> pieces{{std::string(part.text), part.at_start}};
    if (pre_tokenizer_) pre_tokenizer_->apply(pieces);
    for (const Piece& piece : pieces) model_.encode_word(piece.text, cache, ids);
  }

  std::string run_decoder(std::vector<std::string> tokens, DecodeMode mode) const {
    if (!decoder_) {  // `tokenizers` joins with spaces when there is no decoder
      std::string joined;
      for (size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
      return joined;
    }
    decoder_->apply(tokens, mode);
    std::string text;
    for (const std::string& token : tokens) text += token;
    return text;
  }

  void add_token(const json& spec) {
    const auto id = json_integer(spec.at("id"), INT32_MIN, INT32_MAX);
    if (!id)
      throw InputError(file_, "added token " + spec.at("content").dump() + " has id " + spec.at("id").dump() +
                                  ", not a 32-bit integer");
    AddedToken token{spec.at("content").get<std::string>(), static_cast<int32_t>(*id),
                     spec.value("lstrip", false),           spec.value("rstrip", false),
                     spec.value("single_word", false),      spec.value("normalized", false)};
    set_token(token.id, token.content);
    (token.normalized && normalizer_ ? normalized_added_ : raw_added_).add(std::move(token));
  }

  void set_token(int32_t id, const std::string& token) {
    if (id < 0) throw InputError(file_, "negative token id for '" + token + "'");
    // Ids index a dense table: a forged id near 2^31 would ask for tens of GB (fuzz_tokenizer_json).
    if (id >= kMaxTokenId)
      throw InputError(file_, "token id " + std::to_string(id) + " for '" + token + "' is beyond " +
                                  std::to_string(kMaxTokenId) + " (16x the largest vocabulary in use)");
    if (static_cast<size_t>(id) >= id_to_token_.size()) {
      id_to_token_.resize(id + 1);
      known_.resize(id + 1, false);
    }
    id_to_token_[id] = token;
    known_[id] = true;
  }

  bool is_known(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < known_.size() && known_[id]; }

  fs::path file_;
  std::shared_ptr<const ByteAlphabet> alphabet_;
  BpeModel model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Decoder> decoder_;
  SpecialTokenFrame special_frame_;
  AddedTokenMatcher raw_added_;         // matched on the input before normalization
  AddedTokenMatcher normalized_added_;  // matched after normalization ("normalized": true)
  std::vector<std::string> id_to_token_;
  std::vector<bool> known_;
};

}  // namespace

/// Loads a Hugging Face tokenizer.json whose model is BPE (byte-level or SentencePiece-style).
/// Supported: normalizers Sequence/Prepend/Replace/NFC;
/// pre-tokenizers Sequence/Split/ByteLevel/Digits/Metaspace; decoders Sequence/ByteLevel/
/// Metaspace/ByteFallback/Fuse/Strip/Replace; added tokens; post-processors (encode_with_special)
/// TemplateProcessing/ByteLevel/RobertaProcessing/BertProcessing/Sequence.
/// Throws InputError(path, ...) if the file is missing, not JSON, malformed, or uses an
/// unsupported model type / normalizer / pre-tokenizer / decoder / post-processor ("unsupported
/// ... 'Type'"). The model is checked whole at load, naming the field ("model.vocab must be an
/// object of token -> id"): a missing model, a vocab that is not a non-empty object of distinct
/// non-negative ids, merges that are not an array of "a b" strings or ["a", "b"] pairs of
/// vocabulary tokens, an unk_token outside the vocab, options of the wrong type.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::filesystem::path& tokenizer_json) {
  return load_hf_tokenizer_text(read_text_file(tokenizer_json), tokenizer_json);
}

std::unique_ptr<Tokenizer> load_hf_tokenizer_text(std::string_view json_text,
                                                  const std::filesystem::path& tokenizer_json) {
  return make_hf_tokenizer(parse_tokenizer_json(json_text, tokenizer_json), tokenizer_json);
}

nlohmann::json parse_tokenizer_json(std::string_view json_text, const std::filesystem::path& file) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {  // parse_error; out_of_range for a number past double
    throw InputError(file, std::string("not valid JSON: ") + e.what());
  }
  if (!root.is_object()) throw InputError(file, file.filename().string() + " is not a JSON object");
  return root;
}

std::unique_ptr<Tokenizer> make_hf_tokenizer(const nlohmann::json& root, const std::filesystem::path& tokenizer_json) {
  try {
    return std::make_unique<HfTokenizer>(root, tokenizer_json);
  } catch (const json::exception& e) {
    throw InputError(tokenizer_json, std::string("malformed tokenizer.json: ") + e.what());
  }
}

}  // namespace kvscope
