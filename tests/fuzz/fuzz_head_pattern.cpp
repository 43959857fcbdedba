// libFuzzer: a head pattern (DuoAttention / HS-SFT retrieval vs streaming heads, JSON) -> HeadPattern.
// Oracle: bad content throws InputError only; in an accepted pattern every streaming head has
// 0 <= sink <= 2^40 and 1 <= window <= 2^40, and the entries it keeps are computable without
// overflow and never more than the full cache.
#include <cstdint>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "kvscope/core/errors.h"
#include "kvscope/core/head_pattern.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;  // JSON syntax is nlohmann's; the pattern's content is ours
  try {
    const kvscope::HeadPattern p = kvscope::parse_head_pattern(j, "pattern.json");
    int64_t heads = 0;
    for (const auto& layer : p.layers)
      for (const auto& h : layer) {
        ++heads;
        if (h.streaming && (h.sink < 0 || h.window < 1 || h.sink > (int64_t(1) << 40) || h.window > (int64_t(1) << 40)))
          std::abort();
      }
    for (const int64_t n : {int64_t(0), int64_t(1), int64_t(1) << 20, int64_t(1) << 40}) {
      const int64_t kept = p.kept_entries(n);
      if (kept < 0 || kept > heads * n) std::abort();
    }
  } catch (const kvscope::InputError&) {
  }
  return 0;
}
