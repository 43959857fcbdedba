// "rocketkv-mt" multi-turn stage (S7): RocketKV-MT (Behnam et al. 2025 §3.5, docs/methods.md §1.5).
// Stage 1 deletes nothing: the whole history stays in the cache. At every turn the new prompt's KV
// is appended, SnapKV (window 128, max-pool 63, group sum) reselects this turn's filtered set over
// the WHOLE stored history, and decode runs HSA over that set plus the tokens generated in the turn.
// As in the authors' code [C], the filtered set is a per-layer temporary copy held for the turn.
//
// Per layer: scores = snapkv(queries of this turn's block, all cached keys)   fp32 [Hkv, n_hist]
//            keep   = top-P per KV head (P = C - n_gen from rocketkv_split(S = n_hist + n_gen, t))
//            copy   = gather(cache, keep) ++ this turn's decoded entries      (filtered KvCache)
//            attend = hsa over the copy (page min/max, top-k1 channels, top-k2 tokens)
// Storage: full cache + copy + HSA side stores (Table 1: 1 + 2/c^((1+r)/2)); traffic as RocketKV.
#include <ATen/ATen.h>

#include "kvscope/core/kv_cache.h"
#include "policies/entries.h"
#include "policies/scoring.h"

namespace kvscope::policies {
namespace {

constexpr const char* kRef = "RocketKV (Behnam et al. 2025) §3.5 (RocketKV-MT), App. A.3 (SCBench: window 128)";

class RocketKvMt : public DecodeAttentionPolicy {
 public:
  explicit RocketKvMt(const ParamValues& v) : params_(v), snap_(parse_snapkv("rocketkv-mt", v)) {
    ParamValues hsa = {{"stage1", "true"}, {"page", v.at("page")}, {"k1", v.at("k1")}, {"k2", v.at("k2")}};
    auto inner = hsa_entry().make(hsa);
    hsa_.reset(dynamic_cast<DecodeAttentionPolicy*>(inner.release()));
  }
  std::string name() const override { return "rocketkv-mt"; }
  Stage stage() const override { return Stage::kMultiTurn; }
  ParamValues params() const override { return params_; }

  void configure(const RunBudget& budget, const ModelConfig& config) override {
    hsa_->configure(budget, config);
    keep_ = hsa_->eviction_budget(budget).value_or(budget.n_prompt);
    reserve_ = std::max<int64_t>(budget.max_new_tokens, 1);
    if (!copy_ || copy_->n_layer() != config.n_layer) copy_.emplace(config, 1, c10::kCPU, at::kFloat);
    kept_.assign(config.n_layer, Kept{});
    last_layer_ = -1;
  }
  std::optional<int64_t> eviction_budget(const RunBudget& budget) const override { return budget.n_prompt; }

  void on_prefill(int64_t layer, const LayerPrefill& in, KvCache& cache) override {
    const at::Tensor k = cache.keys(layer), v = cache.values(layer), pos = cache.positions(layer);
    if (copy_->layer(layer).k.device() != k.device() || copy_->layer(layer).k.scalar_type() != k.scalar_type())
      copy_.emplace(in.config, 1, k.device(), k.scalar_type());
    const int64_t n = k.size(1), keep = std::min(keep_, n);
    at::Tensor idx = at::stack(topk_sorted_per_row(snapkv_scores(in, snap_), keep)).to(k.device());  // [Hkv, keep]
    auto gather = [&](const at::Tensor& t) {
      return t.gather(1, idx.unsqueeze(-1).expand({idx.size(0), keep, t.size(2)}));
    };
    copy_->assign_layer(layer, gather(k), gather(v), pos.gather(1, idx), reserve_);
    kept_.at(layer) = {idx, n};
    hsa_->on_prefill(layer, in, *copy_);
  }

  at::Tensor attend(int64_t layer, const at::Tensor& q, const KvCache& cache) override {
    // The step's own entry is the newest of every head in the (uniform) full cache.
    const int64_t n = cache.layer(layer).length[0];
    copy_->append(layer, cache.keys(layer).narrow(1, n - 1, 1), cache.values(layer).narrow(1, n - 1, 1),
                  cache.positions(layer)[0].narrow(0, n - 1, 1));
    last_layer_ = layer;
    return hsa_->attend(layer, q, *copy_);
  }
  int64_t bytes_read_last() const override { return hsa_->bytes_read_last(); }
  /// HSA's selection over the filtered copy, mapped back to rows of the full cache attend() was
  /// given: copy row r < P is the r-th kept row (the snapkv top-P, ascending), copy row P + j is
  /// the turn's j-th decoded entry, full-cache row n + j (n = the history length at on_prefill).
  /// The map is increasing, so the rows stay sorted.
  std::vector<at::Tensor> last_selection() const override {
    std::vector<at::Tensor> rows = hsa_->last_selection();
    if (rows.empty() || last_layer_ < 0 || last_layer_ >= static_cast<int64_t>(kept_.size())) return {};
    const Kept& kept = kept_[last_layer_];
    if (!kept.idx.defined()) return {};
    const at::Tensor idx = kept.idx.to(at::kCPU);  // [Hkv, P]
    const int64_t P = idx.size(1);
    for (int64_t h = 0; h < static_cast<int64_t>(rows.size()) && h < idx.size(0); ++h) {
      const at::Tensor r = rows[h];
      const at::Tensor from_kept = P > 0 ? idx[h].index_select(0, r.clamp_max(P - 1).flatten()).reshape_as(r) : r;
      rows[h] = at::where(r < P, from_kept, r - P + kept.n_hist);
    }
    return rows;
  }
  int64_t side_store_bytes() const override {
    return hsa_->side_store_bytes() + (copy_ ? copy_->bytes_allocated() : 0);
  }

 private:
  ParamValues params_;
  SnapKvParams snap_;
  std::unique_ptr<DecodeAttentionPolicy> hsa_;
  std::optional<KvCache> copy_;
  struct Kept {
    at::Tensor idx;      // int64 [Hkv, P]: full-cache rows copied, ascending
    int64_t n_hist = 0;  // full-cache length at on_prefill (the turn's first decoded row)
  };
  std::vector<Kept> kept_;  // [layer]
  int64_t last_layer_ = -1;
  int64_t keep_ = 0, reserve_ = 1;
};

}  // namespace

PolicyRegistry::Entry rocketkv_mt_entry() {
  SnapKvParams d;
  d.window = 128;
  d.kernel = 63;
  d.pool = Pool::kMax;
  d.gqa = GqaReduce::kSum;
  std::vector<ParamSpec> spec = snapkv_spec(d, kRef);
  const auto hsa = hsa_entry().spec;
  for (const auto& p : hsa)
    if (p.key != "stage1") spec.push_back(p);
  return {"rocketkv-mt", Stage::kMultiTurn, spec,
          "multi-turn RocketKV: keep all, reselect with SnapKV over the whole history each turn, decode with HSA "
          "(Behnam et al. 2025 §3.5)",
          [](const ParamValues& v) -> std::unique_ptr<Policy> { return std::make_unique<RocketKvMt>(v); }};
}

}  // namespace kvscope::policies
