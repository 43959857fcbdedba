#pragma once
// Byte-level encodings of the session store: zstd frames, shapes as JSON arrays, token ids as
// little-endian int32 arrays. Private to kvscope_sessions.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::sessions::detail {

/// zstd frame (content size recorded) of `bytes`.
std::vector<uint8_t> zstd_compress(const uint8_t* bytes, size_t n, int level = 3);
/// Decompresses one zstd frame whose content size must be `expected` bytes; nullopt + `error`
/// when the frame is corrupt or of another size.
std::optional<std::vector<uint8_t>> zstd_decompress(const std::vector<uint8_t>& frame, size_t expected,
                                                    std::string& error);

/// "[2,3,4]" (no spaces; "[]" for a scalar).
std::string format_shape(const std::vector<int64_t>& shape);
/// Inverse of format_shape (whitespace tolerated); nullopt for malformed text or negative dims.
std::optional<std::vector<int64_t>> parse_shape(std::string_view text);

/// Token ids as little-endian int32 bytes, and back (nullopt when the size is not a multiple of 4).
std::vector<uint8_t> encode_tokens(const std::vector<int32_t>& ids);
std::optional<std::vector<int32_t>> decode_tokens(const std::vector<uint8_t>& bytes);

}  // namespace kvscope::sessions::detail
