#include "kvscope/core/longbench_metrics.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "kvscope/core/errors.h"
#include "kvscope/core/eval_score.h"
#include "kvscope/core/utf8.h"

namespace kvscope {
namespace {

// The first and last code point of each run of Unicode decimal digits (category Nd, Python's \d on
// str; Unicode 14, Python 3.11).
constexpr std::pair<char32_t, char32_t> kDigitRanges[] = {
    {0x30, 0x39},       {0x660, 0x669},     {0x6F0, 0x6F9},     {0x7C0, 0x7C9},     {0x966, 0x96F},
    {0x9E6, 0x9EF},     {0xA66, 0xA6F},     {0xAE6, 0xAEF},     {0xB66, 0xB6F},     {0xBE6, 0xBEF},
    {0xC66, 0xC6F},     {0xCE6, 0xCEF},     {0xD66, 0xD6F},     {0xDE6, 0xDEF},     {0xE50, 0xE59},
    {0xED0, 0xED9},     {0xF20, 0xF29},     {0x1040, 0x1049},   {0x1090, 0x1099},   {0x17E0, 0x17E9},
    {0x1810, 0x1819},   {0x1946, 0x194F},   {0x19D0, 0x19D9},   {0x1A80, 0x1A89},   {0x1A90, 0x1A99},
    {0x1B50, 0x1B59},   {0x1BB0, 0x1BB9},   {0x1C40, 0x1C49},   {0x1C50, 0x1C59},   {0xA620, 0xA629},
    {0xA8D0, 0xA8D9},   {0xA900, 0xA909},   {0xA9D0, 0xA9D9},   {0xA9F0, 0xA9F9},   {0xAA50, 0xAA59},
    {0xABF0, 0xABF9},   {0xFF10, 0xFF19},   {0x104A0, 0x104A9}, {0x10D30, 0x10D39}, {0x11066, 0x1106F},
    {0x110F0, 0x110F9}, {0x11136, 0x1113F}, {0x111D0, 0x111D9}, {0x112F0, 0x112F9}, {0x11450, 0x11459},
    {0x114D0, 0x114D9}, {0x11650, 0x11659}, {0x116C0, 0x116C9}, {0x11730, 0x11739}, {0x118E0, 0x118E9},
    {0x11950, 0x11959}, {0x11C50, 0x11C59}, {0x11D50, 0x11D59}, {0x11DA0, 0x11DA9}, {0x16A60, 0x16A69},
    {0x16AC0, 0x16AC9}, {0x16B50, 0x16B59}, {0x1D7CE, 0x1D7FF}, {0x1E140, 0x1E149}, {0x1E2F0, 0x1E2F9},
    {0x1E950, 0x1E959}, {0x1FBF0, 0x1FBF9}};

// Non-ASCII characters that are not word characters for normalize_answer's \b (header): Latin-1
// punctuation and symbols, general punctuation, arrows to dingbats, CJK and full-width punctuation,
// specials, emoji. Checked against Python 3.11's re: none of these matches \w.
constexpr std::pair<char32_t, char32_t> kNonWordRanges[] = {
    {0x80, 0xA9},     {0xAB, 0xB1},     {0xB4, 0xB4},     {0xB6, 0xB8},      {0xBB, 0xBB},     {0xBF, 0xBF},
    {0xD7, 0xD7},     {0xF7, 0xF7},     {0x1680, 0x1680}, {0x2000, 0x206F},  {0x2190, 0x245F}, {0x2500, 0x2775},
    {0x2794, 0x2BFF}, {0x3000, 0x3004}, {0x3008, 0x3020}, {0x3030, 0x3030},  {0xFF01, 0xFF0F}, {0xFF1A, 0xFF20},
    {0xFF3B, 0xFF40}, {0xFF5B, 0xFF65}, {0xFFF0, 0xFFFF}, {0x1F300, 0x1FAFF}};

// A byte that is not UTF-8 becomes this plus the byte: a value no code point has.
constexpr char32_t kBadByte = 0x110000;

bool in_ranges(char32_t c, const auto& ranges) {
  for (const auto& [lo, hi] : ranges) {
    if (c < lo) return false;  // sorted
    if (c <= hi) return true;
  }
  return false;
}

bool is_digit(char32_t c) { return in_ranges(c, kDigitRanges); }

bool is_word(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return c < kBadByte && !in_ranges(c, kNonWordRanges);
}

/// The character at text[pos] and its length in bytes (1 for a byte that is not UTF-8).
std::pair<char32_t, size_t> char_at(std::string_view text, size_t pos) {
  const size_t len = valid_utf8_length(text, pos);
  if (len == 0) return {kBadByte + static_cast<unsigned char>(text[pos]), 1};
  return {decode_code_point(text, pos, len), len};
}

/// The character that ends at text[pos - 1].
char32_t char_before(std::string_view text, size_t pos) {
  size_t start = pos - 1;
  while (start > 0 && pos - start < 4 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  const auto [c, len] = char_at(text, start);
  return start + len == pos ? c : kBadByte + static_cast<unsigned char>(text[pos - 1]);
}

std::vector<char32_t> code_points(std::string_view text) {
  std::vector<char32_t> out;
  for (size_t pos = 0; pos < text.size();) {
    const auto [c, len] = char_at(text, pos);
    out.push_back(c);
    pos += len;
  }
  return out;
}

/// re.findall(r"\d+", text): the maximal runs of decimal digits.
std::vector<std::string_view> numbers(std::string_view text) {
  std::vector<std::string_view> out;
  size_t run = std::string_view::npos;
  for (size_t pos = 0; pos <= text.size();) {
    const auto [c, len] = pos < text.size() ? char_at(text, pos) : std::pair<char32_t, size_t>{0, 1};
    if (pos < text.size() && is_digit(c)) {
      if (run == std::string_view::npos) run = pos;
    } else if (run != std::string_view::npos) {
      out.push_back(text.substr(run, pos - run));
      run = std::string_view::npos;
    }
    pos += len;
  }
  return out;
}

/// The fraction of the prediction's numbers equal to `target`; 0 without numbers.
double number_share(std::string_view prediction, std::string_view target) {
  const std::vector<std::string_view> found = numbers(prediction);
  if (found.empty()) return 0.0;
  const auto right = std::count(found.begin(), found.end(), target);
  return static_cast<double>(right) / static_cast<double>(found.size());
}

/// re.findall(marker + r"(\d+)", text)[0]; throws InputError when there is none.
std::string_view first_numbered(std::string_view text, std::string_view marker, const char* metric) {
  for (size_t at = text.find(marker); at != std::string_view::npos; at = text.find(marker, at + 1)) {
    const std::vector<std::string_view> after = numbers(text.substr(at + marker.size()));
    if (!after.empty() && after[0].data() == text.data() + at + marker.size()) return after[0];
  }
  throw InputError(std::string(metric) + ": the answer '" + std::string(text) + "' has no '" + std::string(marker) +
                   "<number>'");
}

/// The rouge package's sentences: pieces between '.', empty ones dropped, words re-joined by ' '.
std::vector<std::string> rouge_sentences(std::string_view text) {
  std::vector<std::string> out;
  for (size_t begin = 0;;) {
    const size_t end = std::min(text.find('.', begin), text.size());
    if (end > begin) {
      std::string sentence;
      for (std::string_view w : python_split(text.substr(begin, end - begin)))
        sentence.append(sentence.empty() ? "" : " ").append(w);
      out.push_back(std::move(sentence));
    }
    if (end == text.size()) return out;
    begin = end + 1;
  }
}

/// sentence.split(" ") (a sentence is normalized, so "" gives one empty word).
std::vector<std::string_view> rouge_words(std::string_view sentence) {
  std::vector<std::string_view> out;
  for (size_t begin = 0;;) {
    const size_t end = std::min(sentence.find(' ', begin), sentence.size());
    out.push_back(sentence.substr(begin, end - begin));
    if (end == sentence.size()) return out;
    begin = end + 1;
  }
}

/// Adds the words of the rouge package's longest common subsequence of x and y (_recon_lcs) to `out`.
void add_lcs_words(const std::vector<std::string_view>& x, const std::vector<std::string_view>& y,
                   std::set<std::string_view>& out) {
  const size_t n = x.size(), m = y.size();
  std::vector<int> table((n + 1) * (m + 1), 0);
  const auto at = [&](size_t i, size_t j) -> int& { return table[i * (m + 1) + j]; };
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j)
      at(i, j) = x[i - 1] == y[j - 1] ? at(i - 1, j - 1) + 1 : std::max(at(i - 1, j), at(i, j - 1));
  for (size_t i = n, j = m; i > 0 && j > 0;) {
    if (x[i - 1] == y[j - 1]) {
      out.insert(x[i - 1]);
      --i, --j;
    } else if (at(i - 1, j) > at(i, j - 1)) {
      --i;
    } else {
      --j;
    }
  }
}

}  // namespace

std::string normalize_answer(std::string_view text) {
  std::string kept;  // lower case, punctuation removed
  for (char c : lower_latin1(text)) {
    const auto b = static_cast<unsigned char>(c);
    const bool punct =
        (b >= 0x21 && b <= 0x2F) || (b >= 0x3A && b <= 0x40) || (b >= 0x5B && b <= 0x60) || (b >= 0x7B && b <= 0x7E);
    if (!punct) kept += c;
  }
  std::string spaced;  // articles replaced by a space
  for (size_t pos = 0; pos < kept.size();) {
    size_t article = 0;
    if ((kept[pos] == 'a' || kept[pos] == 't') && (pos == 0 || !is_word(char_before(kept, pos)))) {
      for (std::string_view a : {"a", "an", "the"}) {  // re tries the alternatives in order
        const size_t end = pos + a.size();
        if (std::string_view(kept).substr(pos).starts_with(a) &&
            (end == kept.size() || !is_word(char_at(kept, end).first))) {
          article = a.size();
          break;
        }
      }
    }
    if (article) {
      spaced += ' ';
      pos += article;
    } else {
      spaced += kept[pos++];
    }
  }
  std::string out;
  for (std::string_view w : python_split(spaced)) out.append(out.empty() ? "" : " ").append(w);
  return out;
}

double qa_f1_score(std::string_view prediction, std::string_view ground_truth) {
  const std::string pred = normalize_answer(prediction), truth = normalize_answer(ground_truth);
  const std::vector<std::string_view> p = python_split(pred), t = python_split(truth);
  std::map<std::string_view, int64_t> left;  // ground-truth tokens not yet matched
  for (std::string_view w : t) ++left[w];
  int64_t same = 0;
  for (std::string_view w : p) {
    auto it = left.find(w);
    if (it != left.end() && it->second > 0) --it->second, ++same;
  }
  if (same == 0) return 0.0;
  const double precision = 1.0 * static_cast<double>(same) / static_cast<double>(p.size());
  const double recall = 1.0 * static_cast<double>(same) / static_cast<double>(t.size());
  return (2 * precision * recall) / (precision + recall);
}

double rouge_score(std::string_view prediction, std::string_view ground_truth) {
  const std::vector<std::string> hyp = rouge_sentences(prediction), ref = rouge_sentences(ground_truth);
  if (hyp.empty() || ref.empty()) return 0.0;
  std::vector<std::vector<std::string_view>> hyp_words, ref_words;
  std::set<std::string_view> hyp_set, ref_set;
  for (const std::string& s : hyp) {
    const auto& words = hyp_words.emplace_back(rouge_words(s));
    hyp_set.insert(words.begin(), words.end());
  }
  for (const std::string& s : ref) {
    const auto& words = ref_words.emplace_back(rouge_words(s));
    ref_set.insert(words.begin(), words.end());
  }
  std::set<std::string_view> lcs_union;
  for (const auto& r : ref_words)
    for (const auto& c : hyp_words) add_lcs_words(r, c, lcs_union);
  const double llcs = static_cast<double>(lcs_union.size());
  const double r_lcs = llcs / static_cast<double>(ref_set.size());
  const double p_lcs = llcs / static_cast<double>(hyp_set.size());
  return 2.0 * ((p_lcs * r_lcs) / (p_lcs + r_lcs + 1e-8));
}

double classification_score(std::string_view prediction, std::string_view ground_truth,
                            const std::vector<std::string>& all_classes) {
  std::vector<std::string_view> matched;
  for (const std::string& c : all_classes) {
    if (prediction.find(c) != std::string_view::npos) matched.push_back(c);
  }
  // Python's list iterator over a list its loop body shrinks: an index that moves on regardless.
  for (size_t i = 0; i < matched.size();) {
    const std::string_view term = matched[i++];
    if (ground_truth.find(term) != std::string_view::npos && term != ground_truth)
      matched.erase(std::find(matched.begin(), matched.end(), term));
  }
  if (std::find(matched.begin(), matched.end(), ground_truth) == matched.end()) return 0.0;
  return 1.0 / static_cast<double>(matched.size());
}

double retrieval_score(std::string_view prediction, std::string_view ground_truth) {
  return number_share(prediction, first_numbered(ground_truth, "Paragraph ", "retrieval_score"));
}

double retrieval_zh_score(std::string_view prediction, std::string_view ground_truth) {
  return number_share(prediction, first_numbered(ground_truth, "段落", "retrieval_zh_score"));
}

double count_score(std::string_view prediction, std::string_view ground_truth) {
  return number_share(prediction, ground_truth);
}

double code_sim_score(std::string_view prediction, std::string_view ground_truth) {
  std::string_view rest = prediction.substr(std::min(prediction.find_first_not_of('\n'), prediction.size()));
  std::string_view line;
  for (bool more = true; more;) {
    const size_t eol = rest.find('\n');
    const std::string_view candidate = rest.substr(0, eol);
    more = eol != std::string_view::npos;
    if (more) rest.remove_prefix(eol + 1);
    if (candidate.find_first_of("`#") == std::string_view::npos && candidate.find("//") == std::string_view::npos) {
      line = candidate;
      break;
    }
  }
  return static_cast<double>(fuzz_ratio(line, ground_truth)) / 100;
}

int fuzz_ratio(std::string_view a, std::string_view b) {
  if (a == b) return 100;
  if (a.empty() || b.empty()) return 0;
  return static_cast<int>(std::nearbyint(100 * sequence_matcher_ratio(a, b)));  // ties to even
}

double sequence_matcher_ratio(std::string_view a_text, std::string_view b_text) {
  const std::vector<char32_t> a = code_points(a_text), b = code_points(b_text);
  const size_t total = a.size() + b.size();
  if (total == 0) return 1.0;
  // b2j: where each character of b occurs, minus the popular ones (autojunk).
  std::unordered_map<char32_t, std::vector<int>> b2j;
  for (size_t j = 0; j < b.size(); ++j) b2j[b[j]].push_back(static_cast<int>(j));
  if (b.size() >= 200) {
    const size_t ntest = b.size() / 100 + 1;
    std::erase_if(b2j, [&](const auto& kv) { return kv.second.size() > ntest; });
  }
  // find_longest_match over a[alo, ahi) x b[blo, bhi), then the recursion on either side of it.
  int64_t matches = 0;
  std::vector<std::array<int, 4>> queue = {{0, static_cast<int>(a.size()), 0, static_cast<int>(b.size())}};
  std::unordered_map<int, int> j2len, next;
  while (!queue.empty()) {
    const auto [alo, ahi, blo, bhi] = queue.back();
    queue.pop_back();
    int besti = alo, bestj = blo, bestsize = 0;
    j2len.clear();
    for (int i = alo; i < ahi; ++i) {
      next.clear();
      if (auto it = b2j.find(a[i]); it != b2j.end()) {
        for (int j : it->second) {
          if (j < blo) continue;
          if (j >= bhi) break;
          auto prev = j2len.find(j - 1);
          const int k = next[j] = (prev == j2len.end() ? 0 : prev->second) + 1;
          if (k > bestsize) besti = i - k + 1, bestj = j - k + 1, bestsize = k;
        }
      }
      std::swap(j2len, next);
    }
    // No junk (isjunk is None): extend over equal characters, popular ones included.
    while (besti > alo && bestj > blo && a[besti - 1] == b[bestj - 1]) --besti, --bestj, ++bestsize;
    while (besti + bestsize < ahi && bestj + bestsize < bhi && a[besti + bestsize] == b[bestj + bestsize]) ++bestsize;
    if (bestsize == 0) continue;
    matches += bestsize;
    if (alo < besti && blo < bestj) queue.push_back({alo, besti, blo, bestj});
    if (besti + bestsize < ahi && bestj + bestsize < bhi)
      queue.push_back({besti + bestsize, ahi, bestj + bestsize, bhi});
  }
  return 2.0 * static_cast<double>(matches) / static_cast<double>(total);
}

std::string_view longbench_first_line(std::string_view prediction) {
  prediction.remove_prefix(std::min(prediction.find_first_not_of('\n'), prediction.size()));
  return prediction.substr(0, prediction.find('\n'));
}

}  // namespace kvscope
