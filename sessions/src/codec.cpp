#include "codec.h"

#include <zstd.h>

#include <cctype>
#include <charconv>
#include <cstring>

namespace kvscope::sessions::detail {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the session format stores little-endian bytes");

std::vector<uint8_t> zstd_compress(const uint8_t* bytes, size_t n, int level) {
  std::vector<uint8_t> out(ZSTD_compressBound(n));
  const size_t got = ZSTD_compress(out.data(), out.size(), bytes, n, level);
  if (ZSTD_isError(got)) return {};  // cannot happen with a compressBound-sized buffer
  out.resize(got);
  return out;
}

std::optional<std::vector<uint8_t>> zstd_decompress(const std::vector<uint8_t>& frame, size_t expected,
                                                    std::string& error) {
  const unsigned long long size = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (size == ZSTD_CONTENTSIZE_ERROR) {
    error = "not a zstd frame";
    return std::nullopt;
  }
  if (size != ZSTD_CONTENTSIZE_UNKNOWN && size != expected) {
    error = "zstd frame holds " + std::to_string(size) + " bytes, expected " + std::to_string(expected);
    return std::nullopt;
  }
  std::vector<uint8_t> out(expected);
  const size_t got = ZSTD_decompress(out.data(), out.size(), frame.data(), frame.size());
  if (ZSTD_isError(got)) {
    error = std::string("zstd: ") + ZSTD_getErrorName(got);
    return std::nullopt;
  }
  if (got != expected) {
    error = "zstd frame holds " + std::to_string(got) + " bytes, expected " + std::to_string(expected);
    return std::nullopt;
  }
  return out;
}

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::optional<std::vector<int64_t>> parse_shape(std::string_view text) {
  size_t i = 0;
  auto skip = [&] {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  };
  skip();
  if (i >= text.size() || text[i] != '[') return std::nullopt;
  ++i;
  std::vector<int64_t> out;
  skip();
  if (i < text.size() && text[i] == ']') {
    ++i;
  } else {
    for (;;) {
      skip();
      int64_t v = 0;
      const auto [p, ec] = std::from_chars(text.data() + i, text.data() + text.size(), v);
      if (ec != std::errc() || v < 0) return std::nullopt;
      out.push_back(v);
      i = static_cast<size_t>(p - text.data());
      skip();
      if (i >= text.size()) return std::nullopt;
      if (text[i] == ',') {
        ++i;
        continue;
      }
      if (text[i] == ']') {
        ++i;
        break;
      }
      return std::nullopt;
    }
  }
  skip();
  if (i != text.size()) return std::nullopt;
  return out;
}

std::vector<uint8_t> encode_tokens(const std::vector<int32_t>& ids) {
  std::vector<uint8_t> out(ids.size() * 4);
  if (!ids.empty()) std::memcpy(out.data(), ids.data(), out.size());
  return out;
}

std::optional<std::vector<int32_t>> decode_tokens(const std::vector<uint8_t>& bytes) {
  if (bytes.size() % 4) return std::nullopt;
  std::vector<int32_t> out(bytes.size() / 4);
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

}  // namespace kvscope::sessions::detail
