#pragma once
// Text helpers shared by layout and drawing (internal to kvscope_viz).
#include <string>
#include <string_view>
#include <vector>

#include "kvscope/viz/canvas.h"

namespace kvscope::viz::detail {

/// `text` with invalid UTF-8 bytes replaced by U+FFFD (control characters kept).
std::string valid_utf8(std::string_view text);

/// Valid UTF-8 for a single line: invalid bytes become U+FFFD, control characters a space.
std::string clean_line(std::string_view text);

/// How a token is shown in a token strip: clean_line() with '\n' as U+21B5, '\t' as U+2192, '\r'
/// dropped, other controls as "\xNN", an all-space token as U+2423 per space, empty as U+2205.
std::string token_display(std::string_view token);

/// `text` cut with a trailing ellipsis so that it is at most max_w wide ("" when even "…" is not).
std::string elide(Canvas& m, const std::string& text, const Font& font, double max_w);

/// `text` wrapped at spaces (or anywhere, for words wider than max_w) into lines of at most max_w.
std::vector<std::string> wrap(Canvas& m, const std::string& text, const Font& font, double max_w);

/// Ascent + descent of `font`.
double line_height(Canvas& m, const Font& font);

}  // namespace kvscope::viz::detail
