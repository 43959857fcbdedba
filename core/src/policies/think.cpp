// "think" S4 channel pruning: ThinK (Xu et al. 2024, "ThinK: Thinner Key Cache by Query-Driven
// Pruning", arXiv 2407.21018), §3: structured, query-driven key-channel pruning, the channel-axis
// baseline of SPARK (the SPARK paper §2; docs/methods.md §4.6). No recovery.
//
// Prefill (on_prefill, per layer, per KV head h, over the n_h entries the cache holds after eviction):
//
//   Q_h      = the last W prompt queries of the G query heads of group h, stacked    [G·W, D]  fp32
//   K_h      = the retained keys of KV head h                                         [n_h, D]  fp32
//   score[j] = ‖Q_h[:, j] K_h[:, j]ᵀ‖_F = ‖Q_h[:, j]‖₂ · ‖K_h[:, j]‖₂                  [D]
//   keep     = the T = floor((1 - ratio)·D) channels with the largest score, the SAME for every entry
//
// ThinK's score is the Frobenius norm of channel j's query-key interaction over the observation
// window (a rank-1 outer product, hence the product of column norms). For GQA we stack the group's
// query heads, which ranks channels exactly as kvpress ThinKPress does (mean over window and group of
// q², times mean over tokens of k²). kvpress prunes int(ratio·D) channels (D - that kept); we keep
// T = floor((1-ratio)·D) as SPARK does, so both methods keep the same number of channels per entry.
//
// Decode (ChannelPruningBase::attend): s_t = (q ⊙ m)·k_t / sqrt(D) for entries pruned at prefill,
// i.e. the query is sliced to the kept channels (the pruned ones contribute 0); out = softmax_fp32(s)·V.
// Keys appended during decode are not pruned (dense q·k): SPARK, which runs ThinK as its baseline,
// does not say whether decode-time keys are pruned, and kvscope keeps them dense for both methods.
//
// Storage (CompactKeys in the cache, as allocated): per pruned entry T key values (cache itemsize);
// plus one kept-channel bitmask of ceil(D/8) bytes per (layer, KV head): the pruned channels are absent.
#include <algorithm>

#include <ATen/ATen.h>

#include "kvscope/core/errors.h"
#include "kvscope/core/kv_cache.h"
#include "policies/channel_pruning.h"
#include "policies/param_builders.h"
#include "policies/scoring.h"

namespace kvscope::policies {
namespace {

constexpr const char* kRef = "ThinK (Xu et al. 2024) §3";

class Think : public ChannelPruningBase {
 public:
  int64_t prefill_queries() const override { return window_; }
  explicit Think(const ParamValues& v)
      : ChannelPruningBase("think", v), ratio_(param_float(v, "ratio")), window_(param_int(v, "window")) {}

  void on_prefill(int64_t layer, const LayerPrefill& in, KvCache& cache) override {
    check_layer_prefill("think", in, /*needs_queries=*/true);
    const int64_t T = in.queries.size(0), H = in.queries.size(1), D = in.queries.size(2);
    const int64_t Hkv = cache.n_head_kv();
    if (Hkv == 0 || H % Hkv != 0 || D != cache.head_dim())
      throw InputError("think: queries [" + std::to_string(T) + ", " + std::to_string(H) + ", " + std::to_string(D) +
                       "] do not fit the cache");
    if (!prunable(cache, layer)) return;
    const int64_t G = H / Hkv, w = std::min(window_, T);
    // ‖Q_h[:, j]‖ over the window and the group's query heads: [Hkv, D].
    const at::Tensor qn = in.queries.narrow(0, T - w, w).to(at::kFloat).pow(2).sum(0).view({Hkv, G, D}).sum(1).sqrt();
    const int64_t keep = kept_channels(ratio_, D);
    const int64_t item = cache.layer(layer).v.element_size();
    std::vector<CompactKeys> keys;
    std::vector<HeadStore> stores;
    for (int64_t h = 0; h < Hkv; ++h) {
      const at::Tensor k = cache.head_keys(layer, h);  // [n, D]
      const int64_t n = k.size(0);
      const at::Tensor score = k.to(at::kFloat).pow(2).sum(0).sqrt().mul_(qn[h].to(k.device()));  // [D]
      at::Tensor channels = at::zeros({D}, k.options().dtype(at::kBool));
      if (keep >= D)
        channels.fill_(true);
      else if (keep > 0)
        channels.scatter_(0, std::get<1>(score.topk(keep)), true);
      keys.push_back(CompactKeys::pack(k, channels.unsqueeze(0)));  // one channel set for the head
      HeadStore s;
      s.n = n;
      s.dense_bytes = n * D * item;
      stores.push_back(std::move(s));
    }
    set_layer(layer, std::move(keys), std::move(stores), cache);
  }

 private:
  double ratio_;
  int64_t window_;
};

}  // namespace

PolicyRegistry::Entry think_entry() {
  return {"think",
          Stage::kChannel,
          {
              float_param("ratio", 0, 1, "0.5",
                          "key-channel pruning ratio λ: every entry of a KV head keeps the same T = floor((1-λ)·D) "
                          "channels",
                          kRef),
              int_param("window", 1, 1 << 20, "32",
                        "observation window: the last `window` prompt queries score the channels", kRef),
          },
          "structured key-channel pruning by ‖Q_win[:, j]‖·‖K[:, j]‖, same channels for every entry (ThinK, Xu et "
          "al. 2024 §3)",
          [](const ParamValues& v) -> std::unique_ptr<Policy> { return std::make_unique<Think>(v); }};
}

}  // namespace kvscope::policies
