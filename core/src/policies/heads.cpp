// "heads" head pattern (S0): runs a DuoAttention / HS-SFT pattern file at inference. Dense KV heads
// keep the whole cache; streaming heads keep `sink` first tokens + the `window` most recent ones and
// decode as a ring buffer (StreamingLLM §3 attention sinks; DuoAttention §3.2 retrieval vs streaming
// heads; HS-SFT §3 per-layer windows, docs/methods.md §5).
#include "kvscope/core/errors.h"
#include "kvscope/core/policy.h"

namespace kvscope::policies {
namespace {

constexpr const char* kRef = "DuoAttention (Xiao et al. 2024) §3.2; HS-SFT §3 (docs/methods.md §5)";

class Heads : public HeadPatternPolicy {
 public:
  explicit Heads(const ParamValues& v) : params_(v) {
    if (v.at("pattern").empty()) throw InputError("heads: parameter 'pattern' (a head-pattern JSON file) is required");
    pattern_ = load_head_pattern(v.at("pattern"));
  }
  std::string name() const override { return "heads"; }
  ParamValues params() const override { return params_; }
  HeadPlan plan(int64_t layer, int64_t kv_head) const override { return pattern_.layers.at(layer).at(kv_head); }

 private:
  ParamValues params_;
  HeadPattern pattern_;
};

}  // namespace

PolicyRegistry::Entry heads_entry() {
  ParamSpec pattern;
  pattern.key = "pattern";
  pattern.type = ParamType::kPath;
  pattern.help =
      "head-pattern JSON (kvscope.head_pattern.v1): per layer and KV head, dense or streaming + sink + window";
  pattern.paper_ref = kRef;
  return {"heads",
          Stage::kHeadPattern,
          {pattern},
          "dense vs streaming (sinks + recent window) KV heads from a pattern file (DuoAttention; HS-SFT)",
          [](const ParamValues& v) -> std::unique_ptr<Policy> { return std::make_unique<Heads>(v); }};
}

}  // namespace kvscope::policies
