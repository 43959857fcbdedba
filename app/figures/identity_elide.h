#pragma once
// Eliding run identities (pipeline strings, titles) that are shown side by side: the part every
// string shares is cut, never the part that tells them apart, so "snapkv:window=32+adakv:alpha=0.2"
// and "...alpha=0.1" in 18 characters read "…+adakv:alpha=0.2" and "…+adakv:alpha=0.1", not two
// identical "snapkv:window=32+…". Torch-free; widths count UTF-8 code points ("…" is one).
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace kvscope::figures {

/// The ellipsis inserted where shared text was cut (U+2026).
inline constexpr const char* kElision = "\xe2\x80\xa6";

/// Number of UTF-8 code points of s (a stray continuation or truncated byte counts as one).
std::size_t utf8_length(const std::string& s);

/// Each of `ids` shortened to at most `width` code points by cutting only text that every id
/// shares: the common prefix (cut from its start, keeping the characters next to the difference,
/// preferably from a stage boundary '+', else ',' ':' ' ') and then the common suffix (cut from its end). The part
/// where an id differs from the others is always kept whole, so an id whose difference alone is
/// wider than `width` comes back longer than `width` (its shared parts elided). Ids that fit are
/// returned unchanged; with one id, or all ids equal, each is cut at its end ("abc…"). Never splits
/// a UTF-8 sequence. width <= 0 counts as 1.
std::vector<std::string> elide_identities(const std::vector<std::string>& ids, int width);

/// elide_identities({a, b}, width) as a pair.
std::pair<std::string, std::string> elide_pair(const std::string& a, const std::string& b, int width);

}  // namespace kvscope::figures
