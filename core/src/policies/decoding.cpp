// "decoding" (S6): eviction while generating. Every `interval` decode steps, right after a layer's
// attention (the step's own entry appended), a KV head holding more than `target` entries keeps
// the top-`target` by the pipeline's scorer, which sees the step's query as its only query, and
// the pipeline's head budget allocates them (Pipeline::evict_decode). The evicted rows are freed:
// the layer is re-packed with room for `interval` more entries.
//
//   interval = 1, target = the run's budget: TOVA's policy (Oren et al. 2024 §3.3: drop the token
//     the newest query attends least, every step), KeyDiff's cap (Park et al. 2025 §3: the cache
//     never grows past N while generating), StreamingLLM's rolling window (Xiao et al. 2024 §3.2:
//     the sinks + the newest entries);
//   interval = k, target = t: kvpress DecodingPress (compression_interval, target_size);
//   with `h2o` (norm=sum): H2O's greedy eviction (Zhang et al. 2023 Alg. 1), ranked by each entry's
//     attention accumulated over every query so far (the pipeline's running totals).
//
// Between evictions a head holds at most max(budget, target) + interval entries (prefill leaves
// the run's budget; target + 1 at interval 1 once evicting). Sliding-window layers keep their ring
// and are never evicted.
#include "policies/param_builders.h"
#include "policies/scoring.h"

namespace kvscope::policies {
namespace {

constexpr const char* kRef = "kvpress DecodingPress; TOVA §3.3; KeyDiff §3; StreamingLLM §3.2; H2O Alg. 1";

class Decoding : public NamedPolicy<DecodeEvictionPolicy> {
 public:
  explicit Decoding(const ParamValues& v)
      : NamedPolicy("decoding", v), interval_(param_int(v, "interval")), target_(param_int(v, "target")) {}
  int64_t interval() const override { return interval_; }
  int64_t target() const override { return target_; }

 private:
  int64_t interval_, target_;
};

}  // namespace

PolicyRegistry::Entry decoding_entry() {
  return {"decoding",
          Stage::kMaintenance,
          {int_param("interval", 1, 1 << 20, "1", "decode steps between evictions (1: every step)", kRef),
           int_param("target", 0, double(int64_t{1} << 40), "0",
                     "entries per KV head an eviction leaves (0: the run's budget)", kRef)},
          "eviction while generating with the pipeline's scorer: TOVA / KeyDiff cap / rolling window "
          "every step, or kvpress DecodingPress",
          [](const ParamValues& v) -> std::unique_ptr<Policy> { return std::make_unique<Decoding>(v); }};
}

}  // namespace kvscope::policies
