// libFuzzer: the safetensors header parser (header length, JSON, dtypes, shapes, offsets).
// Oracle: bad bytes throw InputError only; every accepted entry lies inside the bytes and its byte
// range is exactly its shape times its element size (no wrapped products); accepted entries do not
// overlap, begin at a multiple of their element size and cover the data section without holes.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <utility>
#include <vector>

#include "kvscope/core/errors.h"
#include "kvscope/core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto header = kvscope::parse_safetensors_header(std::span<const uint8_t>(data, size), "fuzz.safetensors");
    if (header.data_offset < 8 || header.data_offset > size) std::abort();
    for (const auto& [name, e] : header.entries) {
      if (e.end < e.begin || e.end > size - header.data_offset) std::abort();
      unsigned __int128 bytes = 1;
      for (int64_t d : e.shape) {
        if (d < 0) std::abort();
        bytes *= static_cast<uint64_t>(d);
        if (bytes > size) break;
      }
      if (bytes > e.end - e.begin && e.end != e.begin) std::abort();
      if (e.begin % kvscope::safetensors_dtype_size(e.dtype) != 0) std::abort();  // aligned
    }
    // The accepted entries lie back to back, none overlapping, covering the data section exactly.
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (const auto& [name, e] : header.entries) ranges.emplace_back(e.begin, e.end);
    std::sort(ranges.begin(), ranges.end());
    uint64_t covered = 0;
    for (const auto& [begin, end] : ranges) {
      if (begin != covered) std::abort();  // an overlap (begin < covered) or a hole
      covered = end;
    }
    if (covered != size - header.data_offset) std::abort();
  } catch (const kvscope::InputError&) {
  }
  return 0;
}
