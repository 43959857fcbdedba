#include "stacked_decode.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "kvscope/core/kv_cache.h"

namespace kvscope {

int64_t StackedDecode::prefill_queries() const {
  const int64_t a = channel_.prefill_queries(), b = selection_.prefill_queries();
  return a < 0 || b < 0 ? -1 : std::max(a, b);
}

void StackedDecode::on_prefill(int64_t layer, const LayerPrefill& in, KvCache& cache) {
  channel_.on_prefill(layer, in, cache);
  selection_.on_prefill(layer, in, cache);
}

void StackedDecode::configure(const RunBudget& budget, const ModelConfig& config) {
  channel_.configure(budget, config);
  selection_.configure(budget, config);
}

at::Tensor StackedDecode::attend(int64_t layer, const at::Tensor& q, const KvCache& cache) {
  at::Tensor out = selection_.attend(layer, q, cache);
  // The selection counted every row it gathered at 2·D·itemsize; count them as the cache stores them.
  const LayerKv& L = cache.layer(layer);
  const int64_t D = cache.head_dim(), item = L.v.element_size(), dense_row = D * item;
  const std::vector<at::Tensor> rows = selection_.last_selection();
  int64_t gathered = 0, stored = 0;
  for (size_t h = 0; h < rows.size(); ++h) {
    const auto hk = static_cast<int64_t>(h);
    const at::Tensor r = std::get<0>(at::_unique(rows[h].reshape({-1})));
    const int64_t n = r.numel();
    gathered += n;
    // Average bytes of one compact entry of this head (its share of the bitmask, signs, μ, 1/a).
    auto per_entry = [&](const std::vector<CompactKeys>& c) {
      return c.empty() || c[h].n == 0 ? 0.0 : static_cast<double>(c[h].bytes()) / static_cast<double>(c[h].n);
    };
    const int64_t nk = L.compact_entries(hk), nv = L.compact_value_entries(hk);
    const int64_t ck = r.lt(nk).sum().item<int64_t>(), cv = r.lt(nv).sum().item<int64_t>();
    stored += static_cast<int64_t>(static_cast<double>(ck) * per_entry(L.compact) +
                                   static_cast<double>(cv) * per_entry(L.compact_v)) +
              (n - ck) * dense_row + (n - cv) * dense_row;
  }
  bytes_last_ = selection_.bytes_read_last() - gathered * 2 * dense_row + stored;
  return out;
}

}  // namespace kvscope
