// libFuzzer: evaluation samples (RULER JSONL / kvpress columns, docs/eval.md) -> EvalSample list.
// Oracle: bad content throws InputError only; every accepted sample has a non-empty id, at least
// one non-empty answer, max_new_tokens >= 1 and a metric the scorer knows, and its first answer
// taken as the prediction scores in [0, 1].
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kvscope/core/errors.h"
#include "kvscope/core/eval_sample.h"
#include "kvscope/core/eval_score.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    for (const kvscope::EvalSample& s : kvscope::parse_eval_samples(text, "samples.jsonl")) {
      if (s.id.empty() || s.answers.empty() || s.max_new_tokens < 1 || !kvscope::is_eval_metric(s.metric)) std::abort();
      for (const std::string& a : s.answers)
        if (a.empty()) std::abort();
      const double v = kvscope::score(s.metric, s.answers.front(), s.answers);
      if (!(v >= 0.0 && v <= 1.0)) std::abort();
    }
  } catch (const kvscope::InputError&) {
  }
  return 0;
}
