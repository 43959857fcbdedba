#pragma once
// Byte-level encodings of the session store: zstd frames, shapes as JSON arrays, token ids as
// little-endian int32 arrays. Private to kvscope_sessions.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::sessions::detail {

/// zstd frame (content size and content checksum recorded) of `bytes`.
std::vector<uint8_t> zstd_compress(const uint8_t* bytes, size_t n, int level = 3);
/// CRC-32 of `bytes` as zlib.crc32 computes it (stored next to blobs and token arrays).
uint32_t crc32(const uint8_t* bytes, size_t n);
inline uint32_t crc32(const std::vector<uint8_t>& v) { return crc32(v.data(), v.size()); }
/// Decompresses one zstd frame whose content size must be `expected` bytes; nullopt + `error`
/// when the frame is corrupt or of another size ("checksum mismatch" when the frame's own
/// content checksum does not match).
std::optional<std::vector<uint8_t>> zstd_decompress(const std::vector<uint8_t>& frame, size_t expected,
                                                    std::string& error);

/// "[2,3,4]" (no spaces; "[]" for a scalar).
std::string format_shape(const std::vector<int64_t>& shape);
/// Largest element count a stored shape may name (2^48): Blob::numel and numel x dtype size stay
/// far inside int64.
inline constexpr int64_t kMaxBlobElements = int64_t(1) << 48;
/// Inverse of format_shape (whitespace tolerated); nullopt for malformed text, negative dims or
/// more than kMaxBlobElements elements.
std::optional<std::vector<int64_t>> parse_shape(std::string_view text);

/// "48,48,0,48" ("" for an empty list), and back: nullopt for malformed text or a negative value.
std::string format_int_list(const std::vector<int64_t>& values);
std::optional<std::vector<int64_t>> parse_int_list(std::string_view text);

/// Token ids as little-endian int32 bytes, and back (nullopt when the size is not a multiple of 4).
std::vector<uint8_t> encode_tokens(const std::vector<int32_t>& ids);
std::optional<std::vector<int32_t>> decode_tokens(const std::vector<uint8_t>& bytes);

}  // namespace kvscope::sessions::detail
