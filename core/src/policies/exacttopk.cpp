// "exacttopk" decode-time selection: the oracle of RocketKV (Behnam et al. 2025, App. A.3 and
// Fig. 1; docs/methods.md §1.8): every decode step, each QUERY head attends only to the k = t cache
// entries with its largest true logits; finding them is free.
//
//   s[h,i]  = q_h · k_i                         fp32, all N rows of the head's KV group
//   I_h     = top-k_i s[h,i]                    per query head (RocketKV code convention [C];
//                                               the paper's budget t is per KV group)
//   y_h     = softmax_{i∈I_h}(s[h,i] / sqrt(D)) · V[I_h]
//
// Shapes: q [n_head, D]; cache rows [len_h, D] per KV head (ragged heads attend over their own
// rows; a head with len_h <= k attends densely). Bytes read: the union of the rows the G query
// heads of a group selected (K and V), nothing for the selection (an oracle).
//
// This file also defines the shared pieces of the S5 policies declared in decode_selection.h:
// topk_stable, selected_attention and DecodeSelectionBase (attend() dispatch, byte counts,
// selection record).
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <ATen/ATen.h>

#include "kvscope/core/errors.h"
#include "kvscope/core/kv_cache.h"
#include "kvscope/core/policies/rocketkv_budget.h"
#include "ops/cuda_ops.h"
#include "policies/decode_selection.h"
#include "policies/param_builders.h"

namespace kvscope::policies {

// ---- shared S5 helpers -------------------------------------------------------------------------

at::Tensor topk_stable(const at::Tensor& scores, int64_t k) {
  const int64_t n = scores.size(-1);
  k = std::clamp<int64_t>(k, 0, n);
  at::Tensor order = std::get<1>(at::sort(scores, /*stable=*/true, /*dim=*/-1, /*descending=*/true));
  return std::get<0>(at::sort(order.narrow(-1, 0, k), -1));
}

at::Tensor selected_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& idx,
                              const at::Tensor& valid) {
  const int64_t B = q.size(0), G = q.size(1), D = q.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  if (!idx.defined()) {                                                       // dense: every row
    at::Tensor s = at::bmm(q, k.to(at::kFloat).transpose(1, 2)).mul_(scale);  // [B, G, N]
    return at::bmm(at::softmax(s, -1), v.to(at::kFloat));
  }
  const int64_t S = idx.size(1), n = idx.size(2);
  at::Tensor flat = idx.reshape({B, S * n, 1}).expand({B, S * n, D});
  at::Tensor kg = k.gather(1, flat).to(at::kFloat);  // [B, S*n, D]
  at::Tensor vg = v.gather(1, flat).to(at::kFloat);
  at::Tensor s;
  if (S == 1) {
    s = at::bmm(q, kg.transpose(1, 2));  // [B, G, n]
  } else {
    if (S != G) throw std::invalid_argument("selected_attention: idx must be [B, 1, n] or [B, G, n]");
    s = at::bmm(q.reshape({B * G, 1, D}), kg.view({B * G, n, D}).transpose(1, 2)).view({B, G, n});
  }
  s.mul_(scale);
  if (valid.defined()) s.masked_fill_(valid.logical_not(), -std::numeric_limits<float>::infinity());
  at::Tensor p = at::softmax(s, -1);
  if (S == 1) return at::bmm(p, vg);
  return at::bmm(p.view({B * G, 1, n}), vg.view({B * G, n, D})).view({B, G, D});
}

// ---- DecodeSelectionBase -----------------------------------------------------------------------

at::Tensor DecodeSelectionBase::attend(int64_t layer, const at::Tensor& q, const KvCache& cache) {
  if (!configured_) throw std::logic_error(name_ + ": attend() before configure()");
  const int64_t Hkv = cache.n_head_kv(), D = cache.head_dim();
  if (layer < 0 || layer >= cache.n_layer())
    throw InputError(name_ + ": layer " + std::to_string(layer) + " outside the cache");
  if (q.dim() != 2 || q.size(1) != D || q.size(0) % Hkv != 0)
    throw InputError(name_ + ": query must be [n_head, " + std::to_string(D) + "] with n_head a multiple of " +
                     std::to_string(Hkv));
  const int64_t H = q.size(0), G = H / Hkv;
  bytes_last_ = 0;
  bytes_pending_.clear();
  selections_.clear();
  if (q.is_cuda() && ops::cuda_kernels_available())
    if (at::Tensor fused = attend_fused(layer, q, cache); fused.defined()) return fused;
  before_attend(layer, cache);
  at::Tensor qg = q.to(at::kFloat).reshape({Hkv, G, D});
  at::Tensor out;
  if (cache.layer(layer).uniform()) {
    out = attend_heads(layer, 0, qg, cache.keys(layer), cache.values(layer));
  } else {
    std::vector<at::Tensor> parts;
    for (int64_t h = 0; h < Hkv; ++h)
      parts.push_back(attend_heads(layer, h, qg.narrow(0, h, 1), cache.head_keys(layer, h).unsqueeze(0),
                                   cache.head_values(layer, h).unsqueeze(0)));
    out = at::cat(parts, 0);
  }
  return out.reshape({H, D}).to(q.scalar_type());
}

at::Tensor DecodeSelectionBase::attend_selected(int64_t h0, const at::Tensor& q, const at::Tensor& k,
                                                const at::Tensor& v, const at::Tensor& idx, const at::Tensor& valid) {
  const int64_t B = q.size(0), N = k.size(1), row_bytes = 2 * k.size(2) * k.element_size();
  if (!idx.defined()) {
    bytes_last_ += B * N * row_bytes;
  } else if (idx.size(1) == 1 && !valid.defined()) {
    bytes_last_ += B * idx.size(2) * row_bytes;
  } else {
    // Distinct rows per KV head (union over its query heads; padding entries point at an extra
    // column N and are dropped), counted on the device and read lazily by bytes_read_last.
    at::Tensor rows = idx.reshape({B, -1});
    if (valid.defined()) rows = rows.masked_fill(valid.reshape({B, -1}).logical_not(), N);
    at::Tensor seen = at::zeros({B, N + 1}, idx.options().dtype(at::kBool));
    seen.scatter_(1, rows, true);
    seen = seen.narrow(1, 0, N);
    bytes_pending_.push_back(seen.sum() * row_bytes);
  }
  selections_.push_back({h0, N, idx, valid});
  return selected_attention(q, k, v, idx, valid);
}

void DecodeSelectionBase::record_fused_selection(const at::Tensor& index, const at::Tensor& count, int64_t row_bytes) {
  selections_.push_back({0, 0, index, {}, count});
  bytes_pending_.push_back(count.sum() * row_bytes);
}

int64_t DecodeSelectionBase::bytes_read_last() const {
  int64_t b = bytes_last_;
  for (const auto& t : bytes_pending_) b += t.item<int64_t>();
  return b;
}

std::vector<at::Tensor> DecodeSelectionBase::last_selection() const {
  std::vector<at::Tensor> out;
  for (const auto& s : selections_) {
    if (s.count.defined()) {  // fused: [Hkv, S] rows ascending, count per head
      const at::Tensor count = s.count.cpu(), idx = s.idx.cpu().to(at::kLong);
      for (int64_t h = 0; h < idx.size(0); ++h)
        out.push_back(idx[h].narrow(0, 0, count[h].item<int64_t>()).unsqueeze(0));
      continue;
    }
    const int64_t B = s.idx.defined() ? s.idx.size(0) : 1;
    for (int64_t b = 0; b < B; ++b) {
      if (!s.idx.defined()) {
        out.push_back(at::arange(s.n_rows, at::TensorOptions().dtype(at::kLong)).unsqueeze(0));
      } else if (s.valid.defined()) {
        std::vector<at::Tensor> rows;
        for (int64_t r = 0; r < s.idx.size(1); ++r) rows.push_back(s.idx[b][r].masked_select(s.valid[b][r]).cpu());
        out.push_back(at::stack(rows, 0));  // quest: one row (shared selection)
      } else {
        out.push_back(std::get<0>(at::sort(s.idx[b].cpu(), -1)));
      }
    }
  }
  return out;
}

// ---- exacttopk ---------------------------------------------------------------------------------

namespace {

constexpr const char* kRef = "RocketKV (Behnam et al. 2025) App. A.3 (Exact-TopK oracle)";

class ExactTopK : public DecodeSelectionBase {
 public:
  explicit ExactTopK(const ParamValues& v) : DecodeSelectionBase("exacttopk", v), k_param_(param_int(v, "k")) {}

  void configure(const RunBudget& budget, const ModelConfig&) override {
    k_ = k_param_ > 0 ? k_param_ : decode_fetch_budget(budget);
    configured_ = true;
  }
  void on_prefill(int64_t, const LayerPrefill&, KvCache&) override {}
  int64_t side_store_bytes() const override { return 0; }

 protected:
  at::Tensor attend_heads(int64_t, int64_t h0, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) override {
    const int64_t N = k.size(1);
    if (k_ >= N) return attend_selected(h0, q, k, v, {});
    at::Tensor s = at::bmm(q, k.to(at::kFloat).transpose(1, 2));  // [B, G, N] true logits (unscaled)
    return attend_selected(h0, q, k, v, topk_stable(s, k_));      // [B, G, k]: one selection per query head
  }

 private:
  int64_t k_param_, k_ = 0;
};

}  // namespace

PolicyRegistry::Entry exacttopk_entry() {
  return {"exacttopk",
          Stage::kDecodeSelection,
          {int_param("k", 0, 1 << 20, "0",
                     "entries each query head attends per decode step, chosen by their true logits (0 = the run's "
                     "token budget t: --budget with --budget-unit fetched, else kept_per_head(prompt))",
                     kRef)},
          "oracle sparse attention: each query head attends its top-k true logits (RocketKV App. A.3)",
          [](const ParamValues& v) -> std::unique_ptr<Policy> { return std::make_unique<ExactTopK>(v); }};
}

}  // namespace kvscope::policies
