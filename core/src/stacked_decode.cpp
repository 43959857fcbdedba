#include "stacked_decode.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>

#include "kvscope/core/kv_cache.h"
#include "policies/channel_pruning.h"
#include "policies/decode_selection.h"

namespace kvscope {

StackedDecode::StackedDecode(DecodeAttentionPolicy& channel, DecodeAttentionPolicy& selection)
    : channel_(channel),
      selection_(selection),
      pruning_(dynamic_cast<policies::ChannelPruningBase*>(&channel)),
      paged_(dynamic_cast<policies::PagedSelectionBase*>(&selection)) {
  if (pruning_ && paged_) paged_->read_compact_rows_with(pruning_);
}

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
  // The selection counted every row it gathered at 2·D·itemsize; count the compact ones as stored.
  const LayerKv& L = cache.layer(layer);
  const std::vector<at::Tensor> rows = selection_.last_selection();
  int64_t saving = 0;
  for (size_t h = 0; h < rows.size(); ++h) {
    const auto hk = static_cast<int64_t>(h);
    const at::Tensor r = std::get<0>(at::_unique(rows[h].reshape({-1})));
    saving += compact_rows_saving(L, hk, r.lt(L.compact_entries(hk)).sum().item<int64_t>());
  }
  bytes_last_ = selection_.bytes_read_last() + saving;
  return out;
}

int64_t StackedDecode::compact_rows_saving(const LayerKv& L, int64_t h, int64_t n) {
  const double dense_row = static_cast<double>(L.v.size(1) * L.v.element_size());
  // Average bytes of one compact entry of this head (its share of the bitmask, signs, μ, 1/a).
  auto per_entry = [&](const std::vector<CompactKeys>& c) {
    return c.empty() || c[h].n == 0 ? dense_row : static_cast<double>(c[h].bytes()) / static_cast<double>(c[h].n);
  };
  return std::llround(static_cast<double>(n) * (per_entry(L.compact) - dense_row + per_entry(L.compact_v) - dense_row));
}

bool StackedDecode::prepare_graph(const KvCache& cache, int64_t steps) {
  // Only a page selection reads compact rows in its kernels (class comment).
  return pruning_ && paged_ && channel_.prepare_graph(cache, steps) && selection_.prepare_graph(cache, steps);
}

int64_t StackedDecode::after_graph_step(const KvCache& cache) {
  int64_t bytes = selection_.after_graph_step(cache);
  const at::Tensor& read_dev = paged_->graph_compact_read();
  if (!read_dev.defined()) return bytes;
  const at::Tensor read = read_dev.cpu();  // waits for the step
  const int64_t* n = read.data_ptr<int64_t>();
  for (int64_t l = 0; l < cache.n_layer(); ++l) {
    const LayerKv& L = cache.layer(l);
    if (!L.has_compact()) continue;
    for (int64_t h = 0; h < cache.n_head_kv(); ++h) bytes += compact_rows_saving(L, h, n[l * cache.n_head_kv() + h]);
  }
  return bytes;
}

}  // namespace kvscope
