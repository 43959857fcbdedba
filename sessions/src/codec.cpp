#include "codec.h"

#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <array>

#include <cctype>
#include <charconv>
#include <cstring>
#include <memory>

namespace kvscope::sessions::detail {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the session format stores little-endian bytes");

std::vector<uint8_t> zstd_compress(const uint8_t* bytes, size_t n, int level) {
  std::vector<uint8_t> out(ZSTD_compressBound(n));
  // The frame records its content size and a checksum of the content (XXH64, low 32 bits), which
  // every zstd decoder (this one, python-zstandard, the zstd tool) verifies.
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);
  const size_t got = ZSTD_compress2(cctx, out.data(), out.size(), bytes, n);
  ZSTD_freeCCtx(cctx);
  if (ZSTD_isError(got)) return {};  // cannot happen with a compressBound-sized buffer
  out.resize(got);
  return out;
}

uint32_t crc32(const uint8_t* bytes, size_t n) {
  // CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320): the one of zlib.crc32 and binascii.crc32.
  static const auto table = [] {
    std::array<std::array<uint32_t, 256>, 4> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (size_t s = 1; s < 4; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {  // slicing by 4
    uint32_t w;
    std::memcpy(&w, bytes + i, 4);
    c ^= w;
    c = table[3][c & 0xff] ^ table[2][(c >> 8) & 0xff] ^ table[1][(c >> 16) & 0xff] ^ table[0][c >> 24];
  }
  for (; i < n; ++i) c = table[0][(c ^ bytes[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
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
  if (size == ZSTD_CONTENTSIZE_UNKNOWN) {  // kvscope records it in every frame (zstd_compress)
    error = "zstd frame does not record its size";
    return std::nullopt;
  }
  // Streamed in steps of 1 MiB, so memory follows what the frame really holds: a damaged or
  // crafted row whose shape and frame header both claim 181 GB gets an error, not the allocation.
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  std::vector<uint8_t> out;
  out.reserve(std::min<size_t>(expected, size_t(64) << 20));
  std::vector<uint8_t> step(std::min<size_t>(std::max<size_t>(expected, 1), size_t(1) << 20));
  ZSTD_inBuffer in{frame.data(), frame.size(), 0};
  for (;;) {
    ZSTD_outBuffer o{step.data(), step.size(), 0};
    const size_t left = ZSTD_decompressStream(dctx.get(), &o, &in);
    if (ZSTD_isError(left)) {
      error = ZSTD_getErrorCode(left) == ZSTD_error_checksum_wrong ? std::string("checksum mismatch")
                                                                   : std::string("zstd: ") + ZSTD_getErrorName(left);
      return std::nullopt;
    }
    if (o.pos > expected - out.size()) {
      error = "zstd frame holds more than the " + std::to_string(expected) + " bytes expected";
      return std::nullopt;
    }
    out.insert(out.end(), step.begin(), step.begin() + static_cast<std::ptrdiff_t>(o.pos));
    if (left == 0) break;                       // the frame is complete
    if (in.pos == in.size && o.pos < o.size) {  // input used up, the frame unfinished
      error = "zstd: truncated frame";
      return std::nullopt;
    }
  }
  if (in.pos != in.size) {
    error = "zstd frame followed by " + std::to_string(in.size - in.pos) + " stray bytes";
    return std::nullopt;
  }
  if (out.size() != expected) {
    error = "zstd frame holds " + std::to_string(out.size()) + " bytes, expected " + std::to_string(expected);
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

std::string format_int_list(const std::vector<int64_t>& values) {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) s += (i ? "," : "") + std::to_string(values[i]);
  return s;
}

std::optional<std::vector<int64_t>> parse_int_list(std::string_view text) {
  std::vector<int64_t> out;
  if (text.empty()) return out;
  for (size_t i = 0;;) {
    int64_t v = 0;
    const auto [p, ec] = std::from_chars(text.data() + i, text.data() + text.size(), v);
    if (ec != std::errc() || v < 0) return std::nullopt;
    out.push_back(v);
    i = static_cast<size_t>(p - text.data());
    if (i == text.size()) return out;
    if (text[i] != ',') return std::nullopt;
    ++i;
  }
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
  // A stored shape names at most 2^48 elements (a petabyte of fp32): beyond that the product (and
  // the byte size the readers compute from it) would overflow int64.
  int64_t numel = 1;
  for (int64_t d : out)
    if (__builtin_mul_overflow(numel, d, &numel) || numel > kMaxBlobElements) return std::nullopt;
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
