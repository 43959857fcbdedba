// llama2.c tok.bin tokenizer, with the encode/decode semantics of karpathy's run.c.
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <queue>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvscope/core/errors.h"
#include "kvscope/core/tokenizer.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;

constexpr int32_t kBosId = 1;
constexpr int32_t kByteTokenOffset = 3;  // run.c: byte b falls back to id b + 3
constexpr float kNoMergeScore = -1e10f;  // run.c only merges pairs scoring above this
constexpr int32_t kMaxPieceLength = 1 << 20;
constexpr size_t kMinVocabulary = kByteTokenOffset + 256;

struct Vocabulary {
  std::vector<std::string> pieces;
  std::vector<float> scores;
};

/// Reads `count` little-endian bytes into `value`; false at end of file.
template <typename T>
bool read_value(std::istream& in, T& value) {
  in.read(reinterpret_cast<char*>(&value), sizeof(T));
  return static_cast<size_t>(in.gcount()) == sizeof(T);
}

/// Reads one (score, length, bytes) record. False at a clean end of file before the record;
/// throws InputError if the record is cut short or its length is impossible.
bool read_piece(std::istream& in, const fs::path& file, int32_t index, Vocabulary& vocab) {
  float score = 0;
  in.read(reinterpret_cast<char*>(&score), sizeof(score));
  if (in.gcount() == 0) return false;
  int32_t length = 0;
  if (in.gcount() != sizeof(score) || !read_value(in, length)) {
    throw InputError(file, "truncated: token " + std::to_string(index) + " has no complete header");
  }
  if (length < 0 || length > kMaxPieceLength) {
    throw InputError(file, "token " + std::to_string(index) + " has invalid length " + std::to_string(length));
  }
  std::string piece(static_cast<size_t>(length), '\0');
  in.read(piece.data(), length);
  if (in.gcount() != length) {
    throw InputError(file, "truncated: token " + std::to_string(index) + " is cut short");
  }
  vocab.pieces.push_back(std::move(piece));
  vocab.scores.push_back(score);
  return true;
}

/// Reads tok.bin from `in`: `vocab_size` records, or all records up to end of file if vocab_size <= 0.
Vocabulary read_tok_bin(std::istream& in, const fs::path& file, int32_t vocab_size) {
  int32_t max_token_length = 0;
  if (!read_value(in, max_token_length)) throw InputError(file, "truncated: no max_token_length header");
  Vocabulary vocab;
  const bool until_eof = vocab_size <= 0;
  for (int32_t i = 0; until_eof || i < vocab_size; ++i) {
    if (!read_piece(in, file, i, vocab)) {
      if (until_eof) break;
      throw InputError(file, "truncated: " + std::to_string(i) + " tokens, expected " + std::to_string(vocab_size));
    }
  }
  if (vocab.pieces.empty()) throw InputError(file, "has no tokens");
  // encode() falls back to ids 3..258 for bytes that are no piece (run.c's byte tokens).
  if (vocab.pieces.size() < kMinVocabulary)
    throw InputError(file, "has " + std::to_string(vocab.pieces.size()) +
                               " tokens; a llama2.c tokenizer needs at least " + std::to_string(kMinVocabulary) +
                               " (3 special + 256 byte tokens)");
  return vocab;
}

/// The byte a piece stands for, parsed like run.c's sscanf(piece, "<0x%02hhX>", &byte).
std::optional<unsigned char> scan_byte_piece(std::string_view piece) {
  if (!piece.starts_with("<0x")) return std::nullopt;
  int value = 0;
  int digits = 0;
  for (size_t i = 3; i < piece.size() && digits < 2; ++i, ++digits) {
    const char c = piece[i];
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    if (digit < 0) break;
    value = value * 16 + digit;
  }
  if (digits == 0) return std::nullopt;
  return static_cast<unsigned char>(value);
}

class Llama2cTokenizer final : public Tokenizer {
 public:
  explicit Llama2cTokenizer(Vocabulary vocab) : vocab_(std::move(vocab)) {
    for (size_t id = 0; id < vocab_.pieces.size(); ++id) {
      ids_by_piece_.emplace(vocab_.pieces[id], static_cast<int32_t>(id));  // first id wins on duplicates
    }
  }

  /// run.c encode() without BOS/EOS: dummy-prefix " " piece (if the text is non-empty), one id
  /// per code point or byte fallback, then best-score merges. Never throws.
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    if (text.empty()) return ids;
    if (const int32_t prefix = lookup(" "); prefix >= 0) ids.push_back(prefix);  // add_dummy_prefix
    append_code_points(text, ids);
    return merge_by_score(ids);
  }

  /// run.c decode() per token (the first token has no previous one); ids outside the vocabulary
  /// are skipped. Never throws.
  std::string decode(std::span<const int32_t> ids) const override {
    std::string text;
    int32_t previous = -1;
    for (int32_t id : ids) {
      if (is_valid(id)) text += decode_piece(previous, id);
      previous = id;
    }
    return text;
  }

  /// The stored piece ("" for an id outside the vocabulary).
  std::string token_text(int32_t id) const override { return is_valid(id) ? vocab_.pieces[id] : std::string(); }

  int32_t vocab_size() const override { return static_cast<int32_t>(vocab_.pieces.size()); }

 private:
  bool is_valid(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < vocab_.pieces.size(); }

  int32_t lookup(std::string_view piece) const {
    const auto it = ids_by_piece_.find(std::string(piece));
    return it == ids_by_piece_.end() ? -1 : it->second;
  }

  /// run.c decode(): strip the leading space after BOS; "<0xNN>" pieces are that raw byte.
  std::string decode_piece(int32_t previous, int32_t id) const {
    std::string_view piece = vocab_.pieces[id];
    if (previous == kBosId && piece.starts_with(' ')) piece.remove_prefix(1);
    if (const auto byte = scan_byte_piece(piece)) return std::string(1, static_cast<char>(*byte));
    return std::string(piece);
  }

  /// One id per UTF-8 code point (a lead byte plus up to 3 continuation bytes, as run.c groups
  /// them), or one byte token per byte if the code point is not a piece.
  void append_code_points(std::string_view text, std::vector<int32_t>& ids) const {
    const auto is_continuation = [&](size_t i) { return (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80; };
    size_t begin = 0;
    while (begin < text.size()) {
      size_t end = begin + 1;
      while (end < text.size() && is_continuation(end) && end - begin < 4) ++end;
      const std::string_view code_point = text.substr(begin, end - begin);
      if (const int32_t id = lookup(code_point); id >= 0) {
        ids.push_back(id);
      } else {
        for (char c : code_point) ids.push_back(static_cast<unsigned char>(c) + kByteTokenOffset);
      }
      begin = end;
    }
  }

  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  struct Candidate {
    float score;
    int32_t pos;
    int32_t left_id;
    int32_t right_id;
    int32_t merged_id;
    bool operator<(const Candidate& other) const {  // top = highest score, then leftmost
      return score != other.score ? score < other.score : pos > other.pos;
    }
  };

  /// run.c's loop (merge the best-scoring adjacent pair, leftmost on ties, until none is a
  /// piece), done with a heap and a linked list instead of rescanning: same result, O(n log n).
  std::vector<int32_t> merge_by_score(const std::vector<int32_t>& ids) const {
    const auto n = static_cast<int32_t>(ids.size());
    std::vector<Symbol> symbols(ids.size());
    std::priority_queue<Candidate> queue;
    for (int32_t i = 0; i < n; ++i) {
      symbols[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, true};
      if (i > 0) push_candidate(queue, symbols, i - 1);
    }
    while (!queue.empty()) {
      const Candidate top = queue.top();
      queue.pop();
      Symbol& left = symbols[top.pos];
      if (!left.alive || left.id != top.left_id || left.next < 0 || symbols[left.next].id != top.right_id) continue;
      Symbol& right = symbols[left.next];
      left.id = top.merged_id;
      right.alive = false;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = top.pos;
      if (left.prev >= 0) push_candidate(queue, symbols, left.prev);
      if (left.next >= 0) push_candidate(queue, symbols, top.pos);
    }
    std::vector<int32_t> out;
    for (const Symbol& s : symbols) {
      if (s.alive) out.push_back(s.id);
    }
    return out;
  }

  void push_candidate(std::priority_queue<Candidate>& queue, const std::vector<Symbol>& symbols, int32_t pos) const {
    const int32_t left_id = symbols[pos].id;
    const int32_t right_id = symbols[symbols[pos].next].id;
    const int32_t merged = lookup(vocab_.pieces[left_id] + vocab_.pieces[right_id]);
    if (merged >= 0 && vocab_.scores[merged] > kNoMergeScore) {
      queue.push({vocab_.scores[merged], pos, left_id, right_id, merged});
    }
  }

  Vocabulary vocab_;
  std::unordered_map<std::string, int32_t> ids_by_piece_;
};

}  // namespace

/// Loads a llama2.c tok.bin (int32 max_token_length, then per token: float32 score, int32
/// length, bytes). Reads `vocab_size` tokens; with vocab_size <= 0 it reads until end of file
/// (the format does not store the count). Throws InputError(path, ...) if the file is missing,
/// unreadable, truncated (fewer than vocab_size tokens or a record cut short) or malformed.
std::unique_ptr<Tokenizer> load_llama2c_tokenizer(const std::filesystem::path& tok_bin, int32_t vocab_size) {
  std::ifstream in(tok_bin, std::ios::binary);
  if (!in) throw InputError(tok_bin, fs::exists(tok_bin) ? "cannot be read" : "no such file");
  return std::make_unique<Llama2cTokenizer>(read_tok_bin(in, tok_bin, vocab_size));
}

std::unique_ptr<Tokenizer> load_llama2c_tokenizer_bytes(std::string_view bytes, int32_t vocab_size,
                                                        const std::filesystem::path& source) {
  std::istringstream in{std::string(bytes), std::ios::binary};
  return std::make_unique<Llama2cTokenizer>(read_tok_bin(in, source, vocab_size));
}

}  // namespace kvscope
