// libFuzzer: a DuoAttention gate file (full_attention_heads.tsv, np.savetxt's tab-separated rows)
// -> DuoGates -> HeadPattern. Oracle: bad content throws InputError only; accepted gates form a
// non-empty rectangle of values in [0, 1]; every binarization (sparsity, threshold) marks exactly
// the heads it promises as streaming, and the pattern built from them keeps no more than the full cache.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kvscope/core/duo_pattern.h"
#include "kvscope/core/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  kvscope::DuoGates g;
  try {
    g = kvscope::parse_duo_gates(text, "full_attention_heads.tsv");
  } catch (const kvscope::InputError&) {
    return 0;
  }
  if (g.gates.empty() || g.lines.size() != g.gates.size()) std::abort();
  const size_t width = g.gates[0].size();
  if (width == 0) std::abort();
  for (const auto& row : g.gates) {
    if (row.size() != width) std::abort();
    for (const double v : row)
      if (!(v >= 0.0 && v <= 1.0)) std::abort();
  }
  const int64_t n = g.n_heads();
  for (const double sparsity : {0.0, 0.3, 0.5, 1.0}) {
    const int64_t streaming = kvscope::duo_streaming_count(n, sparsity);
    if (streaming < 0 || streaming > n) std::abort();
    const auto retrieval = kvscope::duo_retrieval_lowest(g.gates, streaming);
    int64_t dense = 0;
    for (const auto& row : retrieval)
      for (const bool r : row) dense += r;
    if (dense != n - streaming) std::abort();
    kvscope::DuoPatternOptions options;
    options.sparsity = sparsity;
    options.threshold = sparsity;
    for (const auto rule :
         {kvscope::DuoPatternOptions::Rule::kSparsity, kvscope::DuoPatternOptions::Rule::kThreshold}) {
      options.rule = rule;
      const kvscope::HeadPattern p = kvscope::duo_head_pattern(g, options);  // default sizes: never throws
      for (const int64_t tokens : {int64_t(0), int64_t(1), int64_t(1) << 20})
        if (p.kept_entries(tokens) < 0 || p.kept_entries(tokens) > n * tokens) std::abort();
    }
  }
  return 0;
}
