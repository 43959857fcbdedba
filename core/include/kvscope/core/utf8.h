#pragma once
// Well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF), for the
// tokenizers, the chat templates and prompt files. Torch-free (kvscope_spec).
#include <cstddef>
#include <string>
#include <string_view>

namespace kvscope {

/// Length in bytes (1-4) of the well-formed UTF-8 sequence at text[pos], or 0 if it is not well
/// formed (or pos is at the end).
size_t valid_utf8_length(std::string_view text, size_t pos);

/// Offset of the first byte of `text` that does not start a well-formed sequence, or npos.
size_t first_invalid_utf8(std::string_view text);

/// Code point of the well-formed sequence of `len` bytes (valid_utf8_length) at text[pos].
char32_t decode_code_point(std::string_view text, size_t pos, size_t len);

/// Appends the UTF-8 encoding of cp (< 0x110000) to out.
void append_utf8(std::string& out, char32_t cp);

}  // namespace kvscope
