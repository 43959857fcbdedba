#include "ruler_text.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <system_error>

#include "kvscope/core/errors.h"

namespace kvscope::ruler {

uint64_t Rng::below(uint64_t n) {
  if ((n & (n - 1)) == 0) return next() & (n - 1);
  // Draws below 2^64 mod n would make the low residues more likely: reject them.
  const uint64_t reject = (0 - n) % n;
  for (;;) {
    const uint64_t x = next();
    if (x >= reject) return x % n;
  }
}

std::vector<int64_t> Rng::sample_sorted(int64_t n, int64_t k) {
  std::set<int64_t> chosen;
  for (int64_t j = n - k; j < n; ++j) {
    const auto t = static_cast<int64_t>(below(static_cast<uint64_t>(j) + 1));
    if (!chosen.insert(t).second) chosen.insert(j);
  }
  return {chosen.begin(), chosen.end()};
}

std::vector<int64_t> Rng::sample_ordered(int64_t n, int64_t k) {
  std::vector<int64_t> pool(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pool[static_cast<size_t>(i)] = i;
  for (int64_t i = 0; i < k; ++i) {
    const auto j = i + static_cast<int64_t>(below(static_cast<uint64_t>(n - i)));
    std::swap(pool[static_cast<size_t>(i)], pool[static_cast<size_t>(j)]);
  }
  pool.resize(static_cast<size_t>(k));
  return pool;
}

std::string Rng::letters(std::string_view alphabet, int k) {
  std::string out;
  for (int i = 0; i < k; ++i) out += alphabet[below(alphabet.size())];
  return out;
}

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

uint64_t stream_seed(uint64_t seed, uint64_t stream) { return splitmix64(splitmix64(seed) ^ stream); }

std::string read_file_text(const std::filesystem::path& file) {
  std::error_code ec;
  const auto status = std::filesystem::status(file, ec);
  if (ec || !std::filesystem::exists(status)) throw InputError(file, "no such file");
  if (std::filesystem::is_directory(status)) throw InputError(file, "is a directory, not a text file");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError(file, "cannot be read");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw InputError(file, "cannot be read");
  return text;
}

namespace {

/// read_file_text, with its error followed by " (<hint>)": what the file is and where it comes from.
std::string read_text_or_hint(const std::filesystem::path& file, const std::string& hint) {
  try {
    return read_file_text(file);
  } catch (const InputError& e) {
    throw InputError(std::string(e.what()) + " (" + hint + ")");
  }
}

}  // namespace

WordLists load_word_lists(const std::filesystem::path& file) {
  const std::string text =
      read_text_or_hint(file,
                        "the word list of RULER's keys and cwe words: install the Debian package wamerican, or name "
                        "another list of words, one a line");
  WordLists lists;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.size() < 3 || line.size() > 12) continue;
    if (std::all_of(line.begin(), line.end(), [](char c) { return c >= 'a' && c <= 'z'; })) lists.all.push_back(line);
  }
  std::sort(lists.all.begin(), lists.all.end());
  lists.all.erase(std::unique(lists.all.begin(), lists.all.end()), lists.all.end());
  if (lists.all.size() < 100) {
    throw InputError(file, "holds " + std::to_string(lists.all.size()) +
                               " words of 3-12 lowercase letters; RULER's keys and cwe need at least 100 (wamerican "
                               "has about 60000)");
  }
  return lists;
}

void load_key_words(const std::filesystem::path& dir, WordLists& lists) {
  auto common = [&](const std::string& name) {
    const std::filesystem::path file = dir / name;
    const std::string text =
        read_text_or_hint(file,
                          "WordNet's index of RULER's adjective-noun keys: install the Debian package wordnet-base, or "
                          "name another WordNet directory");
    // index.pos(5WN): lemma pos synset_cnt p_cnt [ptr_symbol...] sense_cnt tagsense_cnt synset_offset...
    // License lines start with two spaces.
    std::vector<std::string> words;
    std::istringstream lines(text);
    int64_t line_no = 0;
    for (std::string line; std::getline(lines, line);) {
      ++line_no;
      if (line.empty() || line[0] == ' ') continue;
      std::istringstream fields(line);
      std::string lemma, pos;
      int64_t synsets = 0, pointers = -1;
      fields >> lemma >> pos >> synsets >> pointers;
      if (!fields || pointers < 0)
        throw InputError(file, "line " + std::to_string(line_no) + ": not a WordNet index line");
      std::string skip;
      for (int64_t i = 0; i < pointers; ++i) fields >> skip;
      int64_t senses = 0, tagged = -1;
      fields >> senses >> tagged;
      if (!fields || tagged < 0)
        throw InputError(file, "line " + std::to_string(line_no) + ": not a WordNet index line");
      const bool letters = std::all_of(lemma.begin(), lemma.end(), [](char c) { return c >= 'a' && c <= 'z'; });
      if (letters && lemma.size() >= 3 && lemma.size() <= 10 && tagged >= 2 &&
          std::binary_search(lists.all.begin(), lists.all.end(), lemma))
        words.push_back(lemma);
    }
    std::sort(words.begin(), words.end());
    words.erase(std::unique(words.begin(), words.end()), words.end());
    if (words.size() < 50) {
      throw InputError(file, "yields " + std::to_string(words.size()) +
                                 " common words also in the word list; RULER's keys need at least 50 (WordNet 3.0 "
                                 "with wamerican gives about 900 adjectives and 2,300 nouns)");
    }
    return words;
  };
  lists.adjectives = common("index.adj");
  lists.nouns = common("index.noun");
}

std::vector<std::string> load_essay_words(const std::vector<std::filesystem::path>& files) {
  std::vector<std::string> words;
  for (const auto& file : files) {
    const std::string text = read_file_text(file);
    size_t before = words.size();
    std::string word;
    for (char c : text) {
      if (is_space(c)) {
        if (!word.empty()) words.push_back(std::move(word));
        word.clear();
      } else {
        word += c;
      }
    }
    if (!word.empty()) words.push_back(std::move(word));
    if (words.size() == before) throw InputError(file, "holds no words (an essay haystack file must be text)");
  }
  return words;
}

std::vector<std::string> load_code_lines(const std::vector<std::filesystem::path>& files) {
  std::vector<std::string> lines;
  for (const auto& file : files) {
    const std::string text = read_file_text(file);
    if (text.empty()) throw InputError(file, "is empty (a code haystack file must hold source lines)");
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(start, end - start);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      lines.push_back(std::move(line));
      start = end + 1;
    }
  }
  return lines;
}

namespace {

/// `word` without the closing quotes and brackets at its end (ASCII and U+2019, U+201D).
std::string_view strip_closers(std::string_view word) {
  for (;;) {
    if (!word.empty() && std::string_view("\"')]}").find(word.back()) != std::string_view::npos) {
      word.remove_suffix(1);
    } else if (word.size() >= 3 && word.substr(word.size() - 3) == "\xE2\x80\x99") {
      word.remove_suffix(3);
    } else if (word.size() >= 3 && word.substr(word.size() - 3) == "\xE2\x80\x9D") {
      word.remove_suffix(3);
    } else {
      return word;
    }
  }
}

/// `word` without the opening quotes and brackets at its start (ASCII and U+2018, U+201C).
std::string_view strip_openers(std::string_view word) {
  for (;;) {
    if (!word.empty() && std::string_view("\"'([{").find(word.front()) != std::string_view::npos) {
      word.remove_prefix(1);
    } else if (word.size() >= 3 && (word.substr(0, 3) == "\xE2\x80\x98" || word.substr(0, 3) == "\xE2\x80\x9C")) {
      word.remove_prefix(3);
    } else {
      return word;
    }
  }
}

bool is_abbreviation(std::string_view core) {
  // `core`: the word without openers, closers and its final '.'.
  static const std::array<std::string_view, 30> kAbbreviations = {
      "mr",  "mrs", "ms",  "dr",  "prof", "sr", "jr", "st",  "vs",  "e.g",  "i.e",  "cf",  "inc", "ltd", "co",
      "u.s", "a.m", "p.m", "fig", "no",   "mt", "lt", "gen", "rev", "dept", "corp", "est", "al",  "ca",  "approx"};
  if (core.size() == 1 && ((core[0] >= 'a' && core[0] <= 'z') || (core[0] >= 'A' && core[0] <= 'Z'))) return true;
  std::string lower(core);
  for (char& c : lower) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return std::find(kAbbreviations.begin(), kAbbreviations.end(), lower) != kAbbreviations.end();
}

}  // namespace

bool ends_sentence(std::string_view word, std::string_view next) {
  const std::string_view w = strip_closers(word);
  if (w.empty()) return false;
  const char last = w.back();
  if (last != '.' && last != '!' && last != '?') return false;
  if (last == '.' && is_abbreviation(strip_openers(w.substr(0, w.size() - 1)))) return false;
  const std::string_view n = strip_openers(next);
  return n.empty() || !(n.front() >= 'a' && n.front() <= 'z');
}

const std::vector<int>& ruler_depths() {
  static const std::vector<int> depths = [] {
    std::vector<int> d;
    // round(100 i / 39): no value is within 0.01 of a half, so integer rounding equals numpy's.
    for (int i = 0; i < 40; ++i) d.push_back((200 * i + 39) / 78);
    return d;
  }();
  return depths;
}

}  // namespace kvscope::ruler
