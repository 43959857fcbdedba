// Unicode NFC (UAX #15) with the tables of tools/gen-unicode-nfc.py and Hangul composed by formula.
#include "tokenizer_nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kvscope/core/utf8.h"

namespace kvscope {
namespace {

struct CombiningClassRun {
  char32_t first;
  char32_t last;
  uint8_t combining_class;
};
struct Decomposition {
  char32_t code_point;
  char32_t first;
  char32_t second;  ///< 0 for a singleton decomposition
};
struct Composition {
  char32_t first;
  char32_t second;
  char32_t composite;
};

#include "tokenizer_nfc_data.inc"

// Hangul syllables: S = SBase + (L * VCount + V) * TCount + T (Unicode 15.0, section 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

/// A byte that is not well-formed UTF-8 stands for itself as this value + the byte (no class,
/// no decomposition, never composed).
constexpr char32_t kRawByte = 0x110000;

uint8_t combining_class(char32_t cp) {
  const auto it = std::upper_bound(std::begin(kCombiningClasses), std::end(kCombiningClasses), cp,
                                   [](char32_t value, const CombiningClassRun& run) { return value < run.first; });
  if (it == std::begin(kCombiningClasses)) return 0;
  const CombiningClassRun& run = *(it - 1);
  return cp <= run.last ? run.combining_class : 0;
}

void decompose(char32_t cp, std::u32string& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t index = cp - kSBase;
    out += kLBase + index / kNCount;
    out += kVBase + (index % kNCount) / kTCount;
    if (index % kTCount != 0) out += kTBase + index % kTCount;
    return;
  }
  const auto it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), cp,
                                   [](const Decomposition& d, char32_t value) { return d.code_point < value; });
  if (it == std::end(kDecompositions) || it->code_point != cp) {
    out += cp;
    return;
  }
  decompose(it->first, out);
  if (it->second != 0) decompose(it->second, out);
}

/// The primary composite of `first` + `second`, or 0.
char32_t compose(char32_t first, char32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount)
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 && second > kTBase &&
      second < kTBase + kTCount)
    return first + (second - kTBase);
  const auto it = std::lower_bound(std::begin(kCompositions), std::end(kCompositions), std::make_pair(first, second),
                                   [](const Composition& c, const std::pair<char32_t, char32_t>& value) {
                                     return c.first != value.first ? c.first < value.first : c.second < value.second;
                                   });
  return it != std::end(kCompositions) && it->first == first && it->second == second ? it->composite : 0;
}

/// UTF-8 of cp, or the raw byte it stands for (cp >= kRawByte: a byte of ill-formed input).
void append_char(std::string& out, char32_t cp) {
  if (cp >= kRawByte)
    out += static_cast<char>(cp - kRawByte);
  else
    append_utf8(out, cp);
}

}  // namespace

std::string to_nfc(std::string_view text) {
  // Every byte below 0xCC is ASCII, a lead byte of U+0000-U+02FF or a continuation byte: such text
  // has no combining mark, no decomposable character that could recompose otherwise, no Hangul.
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0xCC; }))
    return std::string(text);
  std::u32string decomposed;
  decomposed.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = valid_utf8_length(text, pos);
    if (len == 0) {
      decomposed += kRawByte + static_cast<unsigned char>(text[pos++]);
      continue;
    }
    decompose(decode_code_point(text, pos, len), decomposed);  // é too: a mark after it may reorder
    pos += len;
  }
  // Canonical ordering: each run of non-starters sorted by class, stably.
  for (size_t i = 0; i < decomposed.size();) {
    if (decomposed[i] >= kRawByte || combining_class(decomposed[i]) == 0) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < decomposed.size() && decomposed[end] < kRawByte && combining_class(decomposed[end]) != 0) ++end;
    std::stable_sort(decomposed.begin() + static_cast<std::ptrdiff_t>(i),
                     decomposed.begin() + static_cast<std::ptrdiff_t>(end),
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = end;
  }
  // Canonical composition: a character joins the last starter unless something between blocks it
  // (a starter, or a mark of the same or a higher class).
  std::u32string composed;
  composed.reserve(decomposed.size());
  ptrdiff_t starter = -1;
  for (char32_t cp : decomposed) {
    const uint8_t cc = cp >= kRawByte ? 0 : combining_class(cp);
    if (starter >= 0 && cp < kRawByte) {
      const bool adjacent = static_cast<ptrdiff_t>(composed.size()) - 1 == starter;
      const uint8_t last_cc = adjacent ? 0 : combining_class(composed.back());
      if (adjacent || (last_cc != 0 && last_cc < cc)) {
        if (const char32_t composite = compose(composed[static_cast<size_t>(starter)], cp)) {
          composed[static_cast<size_t>(starter)] = composite;
          continue;
        }
      }
    }
    if (cc == 0) starter = cp >= kRawByte ? -1 : static_cast<ptrdiff_t>(composed.size());
    composed += cp;
  }
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : composed) append_char(out, cp);
  return out;
}

}  // namespace kvscope
