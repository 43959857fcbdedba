#include "decode_oracle.h"

#include <algorithm>
#include <limits>

#include <ATen/ATen.h>

#include "kvscope/core/policy.h"
#include "ops/capture_ops.h"
#include "ops/cuda_ops.h"

namespace kvscope {

bool DecodeOracle::supported(const KvCache& cache, int64_t n_head) {
  if (cache.n_layer() == 0 || !cache.layer(0).k.is_cuda() || !ops::cuda_kernels_available()) return false;
  const int64_t G = n_head / cache.n_head_kv(), D = cache.head_dim();
  for (int64_t l = 0; l < cache.n_layer(); ++l)
    if (cache.layer(l).has_compact()) return false;  // the exact top-k kernel reads dense keys
  return n_head % cache.n_head_kv() == 0 && G <= 16 && D % 8 == 0 && D <= 256;
}

DecodeOracle::DecodeOracle(const KvCache& cache, int64_t n_head, TopkUnion& topk, const DecodeAttentionPolicy* policy,
                           bool exact)
    : topk_(topk), policy_(policy) {
  const int64_t Hkv = cache.n_head_kv(), G = n_head / Hkv;
  int64_t ws = 0;
  for (int64_t l = 0; l < cache.n_layer(); ++l) {
    const auto& cap = cache.layer(l).capacity;
    max_len_.push_back(std::max<int64_t>(1, *std::max_element(cap.begin(), cap.end())));
    ws = std::max(ws, ops::exact_topk_workspace_bytes(Hkv, G, max_len_.back()));
  }
  const auto opts = cache.layer(0).k.options();
  workspace_ = at::empty({ws}, opts.dtype(at::kByte));
  recall_dev_ = at::full({cache.n_layer(), Hkv}, std::numeric_limits<float>::quiet_NaN(), opts.dtype(at::kFloat));
  recall_host_ = at::full({cache.n_layer(), Hkv}, std::numeric_limits<float>::quiet_NaN(),
                          at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
  if (exact && policy) {
    const int64_t words = (*std::max_element(max_len_.begin(), max_len_.end()) + 31) / 32;
    exact_dev_ = at::zeros({cache.n_layer(), Hkv, words}, opts.dtype(at::kInt));
    exact_host_ = at::zeros({cache.n_layer(), Hkv, words}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
  }
}

void DecodeOracle::add(int64_t layer, const at::Tensor& q, const KvCache& cache, const at::Tensor& offset,
                       const at::Tensor& length) {
  const LayerKv& L = cache.layer(layer);
  std::pair<at::Tensor, at::Tensor> sel;
  if (policy_) sel = policy_->device_selection(layer);
  const at::Tensor seen = topk_.seen(layer);
  ops::exact_topk(q, L.k, L.pos, offset, length, max_len_.at(layer), topk_.k(), seen, sel.first, sel.second,
                  sel.first.defined() ? recall_dev_[layer] : at::Tensor(),
                  exact_dev_.defined() && sel.first.defined() ? exact_dev_[layer] : at::Tensor(), workspace_);
}

void DecodeOracle::stage() {
  recall_host_.copy_(recall_dev_, /*non_blocking=*/true);
  if (exact_dev_.defined()) exact_host_.copy_(exact_dev_, /*non_blocking=*/true);
}

std::vector<int64_t> DecodeOracle::staged_exact_rows(int64_t layer, int64_t head) const {
  std::vector<int64_t> rows;
  if (!exact_host_.defined()) return rows;
  const int64_t words = exact_host_.size(2);
  const auto* w =
      reinterpret_cast<const uint32_t*>(exact_host_.data_ptr<int32_t>()) + (layer * exact_host_.size(1) + head) * words;
  for (int64_t i = 0; i < words; ++i)
    for (uint32_t bits = w[i]; bits != 0; bits &= bits - 1) rows.push_back(i * 32 + __builtin_ctz(bits));
  return rows;
}

std::vector<float> DecodeOracle::staged_recall() const {
  const float* p = recall_host_.data_ptr<float>();
  return {p, p + recall_host_.numel()};
}

}  // namespace kvscope
