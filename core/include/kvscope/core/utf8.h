#pragma once
// Well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF), for the
// tokenizers and for prompt files.
#include <cstddef>
#include <string_view>

namespace kvscope {

/// Length in bytes (1-4) of the well-formed UTF-8 sequence at text[pos], or 0 if it is not well
/// formed (or pos is at the end).
size_t valid_utf8_length(std::string_view text, size_t pos);

/// Offset of the first byte of `text` that does not start a well-formed sequence, or npos.
size_t first_invalid_utf8(std::string_view text);

}  // namespace kvscope
