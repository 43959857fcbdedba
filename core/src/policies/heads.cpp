// "heads" head pattern (S0): runs a DuoAttention / HS-SFT pattern file at inference. Dense KV heads
// keep the whole cache; streaming heads keep `sink` first tokens + the `window` most recent ones and
// decode as a ring buffer (StreamingLLM §3 attention sinks; DuoAttention §3.2 retrieval vs streaming
// heads; HS-SFT §3 per-layer windows, docs/methods.md §5). The pattern is a kvscope JSON file, or
// one of DuoAttention's published gate files binarized by sparsity, threshold or RocketKV's rule for
// DuoAttention at a token budget (RocketKV App. A.3): duo_pattern.h, docs/head-patterns.md.
#include <stdexcept>
#include <string_view>

#include "kvscope/core/duo_pattern.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/policy.h"
#include "param_builders.h"

namespace kvscope::policies {
namespace {

constexpr const char* kRef = "DuoAttention (Xiao et al. 2024) §3.2; HS-SFT §3 (docs/methods.md §5)";
constexpr const char* kDuoRef =
    "DuoAttention (Xiao et al. 2024) §3.2, binarized as mit-han-lab/duo-attention duo_attn/utils.py "
    "sparsify_attention_heads";
constexpr const char* kRocketRef = "RocketKV (Behnam et al. 2025) App. A.3, Baselines: DuoAttention";
constexpr double kMaxSpan = 1099511627776.0;  // 2^40, as head_pattern.cpp

const char* default_of(std::string_view key) {
  for (const auto& d : kHeadsStageDuoDefaults)
    if (key == d.key) return d.value;
  throw std::logic_error("heads: no parameter " + std::string(key));
}

class Heads : public HeadPatternPolicy {
 public:
  explicit Heads(const ParamValues& v) {
    HeadsStagePattern s = resolve_heads_stage(v);
    pattern_ = std::move(s.pattern);
    file_ = std::move(s.file);
    params_ = std::move(s.params);
  }
  std::string name() const override { return "heads"; }
  ParamValues params() const override { return params_; }
  HeadPlan plan(int64_t layer, int64_t kv_head) const override {
    if (layer < 0 || kv_head < 0 || layer >= static_cast<int64_t>(pattern_.layers.size()) ||
        kv_head >= static_cast<int64_t>(pattern_.layers[layer].size()))
      throw std::out_of_range("heads: " + file_ + " has " + std::to_string(pattern_.layers.size()) + " layers of " +
                              std::to_string(pattern_.layers.empty() ? 0 : pattern_.layers[0].size()) +
                              " KV heads; the model asks for layer " + std::to_string(layer) + " KV head " +
                              std::to_string(kv_head));
    return pattern_.layers[layer][kv_head];
  }
  void check(const ModelConfig& config) const override {
    const auto n_layer = static_cast<int64_t>(pattern_.layers.size());
    bool same = n_layer == config.n_layer;
    for (const auto& row : pattern_.layers) same = same && static_cast<int64_t>(row.size()) == config.n_head_kv;
    if (!same)
      throw InputError(file_, "holds a pattern of " + std::to_string(n_layer) + " layers of " +
                                  std::to_string(pattern_.layers.empty() ? 0 : pattern_.layers[0].size()) +
                                  " KV heads; the model has " + std::to_string(config.n_layer) + " layers of " +
                                  std::to_string(config.n_head_kv) + " KV heads");
  }

 private:
  ParamValues params_;  ///< as given, with a DuoAttention pattern's sink and recent as run
  std::string file_;
  HeadPattern pattern_;
};

}  // namespace

PolicyRegistry::Entry heads_entry() {
  ParamSpec pattern;
  pattern.key = "pattern";
  pattern.type = ParamType::kPath;
  pattern.help =
      "head pattern: a kvscope.head_pattern.v1 JSON file (per layer and KV head, dense or streaming + sink + "
      "window), or a DuoAttention pattern: a directory holding full_attention_heads.tsv (+ config.json), or the .tsv";
  pattern.paper_ref = kRef;
  return {
      "heads",
      Stage::kHeadPattern,
      {pattern,
       float_param("sparsity", 0, 1, default_of("sparsity"),
                   "DuoAttention patterns: share of KV heads that stream, lowest gates first (threshold = the gates' "
                   "sparsity-quantile; ceil(sparsity x (n - 1)) of n heads stream)",
                   kDuoRef),
       float_param("threshold", 0, 1, default_of("threshold"),
                   "DuoAttention patterns: heads with gate >= threshold stay dense, the rest stream (0 = use sparsity)",
                   kDuoRef),
       int_param("sink", -1, kMaxSpan, default_of("sink"),
                 "DuoAttention patterns: sink tokens of streaming heads (-1 = config.json's sink_size, 64 without one)",
                 kDuoRef),
       int_param("recent", -1, kMaxSpan, default_of("recent"),
                 "DuoAttention patterns: recent window of streaming heads (-1 = config.json's recent_size, 256 without "
                 "one)",
                 kDuoRef),
       choice_param("budget_rule", {"none", "rocketkv"}, default_of("budget_rule"),
                    "rocketkv: DuoAttention at token budget t = tokens per KV head as RocketKV runs it; t > 640: 128 "
                    "sinks + 512 recent, the highest gates dense in share (t - 640) / (length - 640), rounded down; "
                    "t <= 640: all heads stream, 128 sinks (20% of t for t <= 256), the rest recent",
                    kRocketRef),
       int_param("tokens", 0, kMaxSpan, default_of("tokens"), "budget_rule=rocketkv: the token budget t per KV head",
                 kRocketRef),
       int_param("length", 0, kMaxSpan, default_of("length"),
                 "budget_rule=rocketkv, t > 640: sequence length L the dense-head share is set for (dense heads keep "
                 "L entries; e.g. the prompt length)",
                 kRocketRef)},
      "dense vs streaming (sinks + recent window) KV heads from a pattern file (DuoAttention; HS-SFT)",
      [](const ParamValues& v) -> std::unique_ptr<Policy> { return std::make_unique<Heads>(v); }};
}

}  // namespace kvscope::policies
