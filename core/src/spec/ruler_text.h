#pragma once
// Building blocks of the RULER task generator (ruler_tasks.cpp; internal to kvscope_spec): a
// platform-independent random source, the word lists, and the essay and code haystack sources.
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::ruler {

/// Random draws whose results are the same on every platform: std::mt19937_64's output is fixed by
/// the standard, and every mapping to a range, a shuffle or a sample is written here (the standard
/// distributions are implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  uint64_t next() { return gen_(); }
  /// Uniform in [0, n); n > 0. Rejection sampling, no modulo bias.
  uint64_t below(uint64_t n);
  /// Uniform in [lo, hi] (inclusive); lo <= hi.
  int64_t between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1));
  }
  /// Fisher-Yates.
  template <class T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
  }
  /// k distinct values of [0, n), ascending (Floyd's algorithm); k <= n.
  std::vector<int64_t> sample_sorted(int64_t n, int64_t k);
  /// k distinct values of [0, n) in random order (a partial Fisher-Yates); k <= n.
  std::vector<int64_t> sample_ordered(int64_t n, int64_t k);
  /// `k` random letters of `alphabet` (each uniform).
  std::string letters(std::string_view alphabet, int k);

 private:
  std::mt19937_64 gen_;
};

/// An independent seed for stream `stream` of `seed` (SplitMix64 of both).
uint64_t stream_seed(uint64_t seed, uint64_t stream);

/// The words of RULER's keys and word tasks: `all`, the word list (3-12 lowercase ASCII letters,
/// sorted bytewise, unique: cwe's words), and `adjectives` / `nouns` for niah's adjective-noun keys,
/// which RULER draws from wonderwords' lists of common adjectives and nouns (niah.py
/// `generate_random_word`): here WordNet's common ones (load_key_words).
struct WordLists {
  std::vector<std::string> all;
  std::vector<std::string> adjectives;
  std::vector<std::string> nouns;
};

/// Reads a word list (one word a line) into `all`. Throws InputError naming the file (and the
/// Debian package wamerican) when it cannot be read or holds too few words.
WordLists load_word_lists(const std::filesystem::path& file);

/// Fills `lists.adjectives` and `lists.nouns` from WordNet's index.adj and index.noun in `dir`
/// (Debian's wordnet-base): lemmas of 3-10 lowercase ASCII letters with a tagged-sense count of at
/// least 2 (WordNet's measure of how often a word occurs in its tagged corpus, the sense-count
/// field of index.pos(5WN)) that are also in `lists.all`, sorted bytewise. About 900 adjectives and
/// 2,300 nouns with wamerican, where wonderwords has about 1,300 and 6,800. Throws InputError
/// naming the file (and the package) when an index cannot be read or yields fewer than 50 words.
void load_key_words(const std::filesystem::path& dir, WordLists& lists);

/// The bytes of `file`; InputError(file, ...) when it is missing, not a regular file or unreadable.
std::string read_file_text(const std::filesystem::path& file);

/// The essay haystack: the files' texts concatenated (a newline between two files), every run of
/// whitespace one space, split into words. Throws InputError for an unreadable file or no words.
std::vector<std::string> load_essay_words(const std::vector<std::filesystem::path>& files);

/// The code haystack: every line of every file in order (without its '\n' or a '\r' before it; a
/// last line without '\n' counts). Throws InputError for an unreadable file or no lines at all.
std::vector<std::string> load_code_lines(const std::vector<std::filesystem::path>& files);

/// Whether a sentence ends after essay word `word` when `next` follows it (NLTK punkt's decisions,
/// approximated): the word ends in '.', '!' or '?' (before closing quotes or brackets), is not a
/// known abbreviation or a single-letter initial, and `next` does not start with a lowercase letter.
bool ends_sentence(std::string_view word, std::string_view next);

/// RULER's DEPTHS: numpy's round(linspace(0, 100, 40)) as integers.
const std::vector<int>& ruler_depths();

}  // namespace kvscope::ruler
