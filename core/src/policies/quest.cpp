// "quest" decode-time selection: Quest (Tang et al. 2024, "Query-Aware Sparsity for Efficient
// Long-Context LLM Inference", ICML'24) §3.2-3.3, as RocketKV configures it for GQA (Behnam et al.
// 2025, App. A.3; docs/methods.md §1.8):
//
//   pages     consecutive `page` cache entries in storage order; Kmin/Kmax = element-wise min/max
//             of their keys (PageMinMax, kept up to date as decode appends)
//   u[h,P]    = Σ_j max(q_{h,j}·Kmax[P,j], q_{h,j}·Kmin[P,j])      upper bound of q_h·k over page P
//   U[P]      = Σ_{h in group} u[h,P]                               GQA: group-accumulated (App. A.3)
//   pages     top ceil(k/page) pages of U (ties: lower page first)
//   y_h       = softmax(q_h K[rows]ᵀ / sqrt(D)) V[rows] over all rows of the selected pages
//
// Budget: RocketKV splits t evenly between approximation and attention, so k = t/2 tokens
// (ceil(k/page) pages, at most k + page - 1 rows). RocketKV does not state the page size of its
// Quest baseline; kvscope defaults to 16, Quest's own page size. With a fixed page size the
// approximation reads 2·D values per page, which matches t/2 KV pairs only when page = 2·N/t.
// Shapes: q [n_head, D]; per KV head pages [ceil(len_h / page), D]; fp32 scores. A head with
// ceil(k/page) >= its page count attends densely, and so does a streaming head of a head pattern
// (a ring buffer: sinks + recent window; only retrieval heads select pages, and rings are never
// summarised; PagedSelectionBase in decode_selection.h says why).
//
// This file also defines PageMinMax and PagedSelectionBase (decode_selection.h), shared with "hsa".
#include <algorithm>
#include <stdexcept>

#include <ATen/ATen.h>

#include "kvscope/core/kv_cache.h"
#include "kvscope/core/policies/rocketkv_budget.h"
#include "ops/cuda_ops.h"
#include "ops/page_ops.h"
#include "policies/channel_pruning.h"
#include "policies/decode_selection.h"
#include "policies/param_builders.h"

namespace kvscope::policies {

// ---- PageMinMax --------------------------------------------------------------------------------

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

void PageMinMax::reset(int64_t n_layer, int64_t page) {
  page_ = std::max<int64_t>(1, page);
  layers_.assign(static_cast<size_t>(n_layer), Layer{});
}

void PageMinMax::reserve(Layer& L, int64_t pages) {
  const int64_t cap = L.kmin.size(1);
  if (pages <= cap) return;
  const int64_t new_cap = std::max(pages, 2 * cap);
  at::Tensor kmin = at::empty({L.kmin.size(0), new_cap, L.kmin.size(2)}, L.kmin.options());
  at::Tensor kmax = at::empty_like(kmin);
  kmin.narrow(1, 0, cap).copy_(L.kmin);
  kmax.narrow(1, 0, cap).copy_(L.kmax);
  L.kmin = kmin;
  L.kmax = kmax;
}

void PageMinMax::fill(Layer& L, int64_t h0, const at::Tensor& keys, int64_t first_page, int64_t base) {
  // keys: [B, len - base, D] rows of entries base .. len-1 of heads h0 .. h0+B-1 (same len), base
  // <= first_page * page; recompute pages first_page .. end.
  const int64_t B = keys.size(0), len = base + keys.size(1), D = keys.size(2);
  const int64_t n_pages = ceil_div(len, page_);
  if (first_page < n_pages) {
    const int64_t start = first_page * page_, m = len - start, full = m / page_, rem = m % page_;
    at::Tensor rows = keys.narrow(1, start - base, m);
    at::Tensor mn = L.kmin.narrow(0, h0, B), mx = L.kmax.narrow(0, h0, B);
    if (full > 0) {
      at::Tensor r = rows.narrow(1, 0, full * page_).reshape({B, full, page_, D});
      mn.narrow(1, first_page, full).copy_(r.amin(2));
      mx.narrow(1, first_page, full).copy_(r.amax(2));
    }
    if (rem > 0) {
      at::Tensor r = rows.narrow(1, full * page_, rem);
      mn.select(1, first_page + full).copy_(r.amin(1));
      mx.select(1, first_page + full).copy_(r.amax(1));
    }
  }
  for (int64_t b = 0; b < B; ++b) L.covered[h0 + b] = len;
}

void PageMinMax::rebuild(int64_t l, const KvCache& cache) {
  Layer& L = layers_.at(l);
  const LayerKv& kv = cache.layer(l);
  const int64_t Hkv = cache.n_head_kv(), D = cache.head_dim();
  int64_t pages = 1;
  for (int64_t h = 0; h < Hkv; ++h)
    if (!kv.ring(h)) pages = std::max(pages, ceil_div(kv.length[h], page_));
  pages += ceil_div(64, page_);  // room for some decode appends before the first growth
  L.kmin = at::empty({Hkv, pages, D}, kv.k.options());
  L.kmax = at::empty_like(L.kmin);
  L.covered.assign(static_cast<size_t>(Hkv), 0);
  L.built = true;
  L.edge.reset();
  if (kv.uniform()) {
    const at::Tensor keys = cache.keys(l);  // every head in one pass (a uniform layer has no ring)
    fill(L, 0, keys, 0);
    return set_edge(L, kv, [&](int64_t h) { return keys[h]; });
  }
  std::vector<at::Tensor> heads(static_cast<size_t>(Hkv));  // recovered once, for the pages and the edge
  for (int64_t h = 0; h < Hkv; ++h) {
    if (kv.ring(h)) continue;  // a ring head keeps covered 0: no pages
    heads[h] = cache.head_keys(l, h);
    fill(L, h, heads[h].unsqueeze(0), 0);
  }
  set_edge(L, kv, [&](int64_t h) { return heads[h]; });
}

template <typename Keys>
void PageMinMax::set_edge(Layer& L, const LayerKv& kv, const Keys& head_keys) {
  if (kv.compact.empty()) return;
  const int64_t Hkv = static_cast<int64_t>(kv.length.size()), D = L.kmin.size(2);
  at::Tensor mn = at::zeros({Hkv, D}, kv.k.options()), mx = at::zeros_like(mn);
  std::vector<int64_t> first(static_cast<size_t>(Hkv));
  for (int64_t h = 0; h < Hkv; ++h) {
    const int64_t c = kv.compact_entries(h), p0 = c / page_ * page_;
    first[h] = c;
    if (c == p0) continue;                                       // the dense keys begin a page
    const at::Tensor rows = head_keys(h).narrow(0, p0, c - p0);  // recovered, as the cache reads them
    mn[h].copy_(rows.amin(0));
    mx[h].copy_(rows.amax(0));
  }
  L.edge = ops::CompactPageEdge{kv.k.is_cuda() ? ops::upload_int64(first, kv.k.device()) : at::tensor(first), mn, mx};
}

void PageMinMax::fill_appended(Layer& L, const LayerKv& kv, int64_t h) {
  // Only the dense rows are read: the entries past the compact ones, and the compact ones of the
  // page where they begin as the edge's min / max.
  const int64_t len = kv.length[h], c = kv.compact_entries(h);
  int64_t first_page = L.covered[h] / page_, start = first_page * page_;
  if (start < c) {
    const int64_t end = std::min(len, start + page_);
    at::Tensor mn = L.edge->min[h], mx = L.edge->max[h];
    if (end > c) {
      const at::Tensor rows = kv.k.narrow(0, kv.key_row(h, c), end - c);
      mn = at::minimum(mn, rows.amin(0));
      mx = at::maximum(mx, rows.amax(0));
    }
    L.kmin[h][first_page].copy_(mn);
    L.kmax[h][first_page].copy_(mx);
    start = end;
    ++first_page;
  }
  if (len > start) fill(L, h, kv.k.narrow(0, kv.key_row(h, start), len - start).unsqueeze(0), first_page, start);
  L.covered[h] = len;
}

const ops::CompactPageEdge* PageMinMax::compact_edge(int64_t l) const {
  const Layer& L = layers_.at(l);
  return L.edge ? &*L.edge : nullptr;
}

void PageMinMax::prepare(int64_t l, const KvCache& cache, int64_t steps) {
  sync(l, cache);
  const LayerKv& kv = cache.layer(l);
  int64_t pages = 1;
  for (size_t h = 0; h < kv.length.size(); ++h)
    if (!kv.ring(h)) pages = std::max(pages, ceil_div(kv.length[h] + steps, page_));
  reserve(layers_.at(l), pages);
}

void PageMinMax::mark_covered(int64_t l, const KvCache& cache) {
  const LayerKv& kv = cache.layer(l);
  Layer& L = layers_.at(l);
  L.covered = kv.length;
  for (size_t h = 0; h < L.covered.size(); ++h)
    if (kv.ring(h)) L.covered[h] = 0;
}

bool PageMinMax::cover_last_page(int64_t l, const KvCache& cache) {
  Layer& L = layers_.at(l);
  const LayerKv& kv = cache.layer(l);
  const int64_t Hkv = cache.n_head_kv();
  if (!L.built || static_cast<int64_t>(L.covered.size()) != Hkv || kv.has_ring()) return false;
  int64_t pages = 0;
  for (int64_t h = 0; h < Hkv; ++h) {
    const int64_t n = kv.length[h], c = L.covered[h];
    if (n < c || (n > c && c / page_ != (n - 1) / page_)) return false;  // eviction, or a new page
    pages = std::max(pages, ceil_div(n, page_));
  }
  reserve(L, pages);
  L.covered = kv.length;
  return true;
}

void PageMinMax::sync(int64_t l, const KvCache& cache) {
  Layer& L = layers_.at(l);
  const LayerKv& kv = cache.layer(l);
  const int64_t Hkv = cache.n_head_kv();
  bool shrank = !L.built || static_cast<int64_t>(L.covered.size()) != Hkv;
  for (int64_t h = 0; !shrank && h < Hkv; ++h) shrank = !kv.ring(h) && kv.length[h] < L.covered[h];
  if (shrank) return rebuild(l, cache);
  int64_t pages = 0;
  bool same = true;
  for (int64_t h = 0; h < Hkv; ++h) {
    if (kv.ring(h))
      L.covered[h] = 0;  // also a head that became a ring since the last build
    else
      pages = std::max(pages, ceil_div(kv.length[h], page_));
    same = same && L.covered[h] == L.covered[0];
  }
  reserve(L, pages);
  if (kv.has_compact() && L.edge) {  // a channel stage's compact keys: no recovery (fill_appended)
    for (int64_t h = 0; h < Hkv; ++h)
      if (kv.length[h] > L.covered[h]) fill_appended(L, kv, h);
    return;
  }
  if (kv.uniform() && same) {
    if (kv.length[0] > L.covered[0]) fill(L, 0, cache.keys(l), L.covered[0] / page_);
    return;
  }
  for (int64_t h = 0; h < Hkv; ++h)
    if (!kv.ring(h) && kv.length[h] > L.covered[h])
      fill(L, h, cache.head_keys(l, h).unsqueeze(0), L.covered[h] / page_);
}

int64_t PageMinMax::n_pages(int64_t l, int64_t h) const { return ceil_div(layers_.at(l).covered.at(h), page_); }

at::Tensor PageMinMax::kmin(int64_t l, int64_t h0, int64_t B) const {
  return layers_.at(l).kmin.narrow(0, h0, B).narrow(1, 0, n_pages(l, h0));
}
at::Tensor PageMinMax::kmax(int64_t l, int64_t h0, int64_t B) const {
  return layers_.at(l).kmax.narrow(0, h0, B).narrow(1, 0, n_pages(l, h0));
}

int64_t PageMinMax::bytes() const {
  int64_t b = 0;
  for (const auto& L : layers_) {
    if (!L.built) continue;
    for (int64_t n : L.covered) b += ceil_div(n, page_) * 2 * L.kmin.size(2) * L.kmin.element_size();
  }
  return b;
}

// ---- quest -------------------------------------------------------------------------------------

// ---- PagedSelectionBase ------------------------------------------------------------------------

void PagedSelectionBase::before_attend(int64_t layer, const KvCache& cache) {
  pages_.sync(layer, cache);
  const LayerKv& kv = cache.layer(layer);
  ring_.assign(static_cast<size_t>(cache.n_head_kv()), false);
  for (int64_t h = 0; h < cache.n_head_kv(); ++h) ring_[h] = kv.ring(h);
}

at::Tensor PagedSelectionBase::attend_heads(int64_t layer, int64_t h0, const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& v) {
  // A streaming head: its sinks + window, every row (see the class comment). A layer holding one is
  // ragged, so attend() hands it over alone (B = 1).
  if (h0 < static_cast<int64_t>(ring_.size()) && ring_[h0]) {
    if (q.size(0) != 1) throw std::logic_error(name() + ": a ring head in a batch of KV heads");
    return attend_selected(h0, q, k, v, {});
  }
  return attend_pages(layer, h0, q, k, v);
}

bool PagedSelectionBase::kernels_fit(const KvCache& cache) const {
  // The head_dims decode_attention_gather and page_select take (CudaPageSelect covers each).
  const int64_t d = cache.head_dim();
  return (d == 64 || d == 96 || d == 128 || d == 256) && n_head_ / cache.n_head_kv() <= 16;
}

bool PagedSelectionBase::reads_compact(int64_t layer, const KvCache& cache) const {
  return channel_ && channel_->reads_rows(layer, cache) && pages_.compact_edge(layer);
}

at::Tensor PagedSelectionBase::attend_kernels(int64_t layer, const at::Tensor& q, const KvCache& cache,
                                              const at::Tensor& offset_dev, const at::Tensor& length_dev,
                                              int64_t max_pages, int64_t max_rows, bool record, bool graph) {
  const LayerKv& kv = cache.layer(layer);
  const int64_t G = q.size(0) / cache.n_head_kv();
  const KernelPlan k = kernel_plan(cache.head_dim());
  const bool compact = kv.has_compact();
  if (compact && !reads_compact(layer, cache))
    throw std::logic_error(name() + ": layer " + std::to_string(layer) + " holds compact keys no kernel reads");
  auto [index, count] =
      ops::page_select(k.hsa ? ops::PageScore::kHsa : ops::PageScore::kQuest, q, pages_.kmin_all(layer),
                       pages_.kmax_all(layer), length_dev, max_pages, G, pages_.page(), k.k1, k.keep, kv.k, offset_dev,
                       compact ? pages_.compact_edge(layer) : nullptr);
  if (record) record_fused_selection(index, count, 2 * kv.v.size(1) * kv.v.element_size());
  if (!record) {
    if (static_cast<int64_t>(device_selection_.size()) <= layer) device_selection_.resize(layer + 1);
    device_selection_[layer] = {index, count};
  }
  if (!record && stage_dev_.defined()) {  // the graph path: copies captured with the step
    const int64_t H = index.size(0), W = std::min(index.size(1), stage_width_);
    at::Tensor slot =
        stage_dev_.narrow(0, layer * H * (stage_width_ + 1), H * (stage_width_ + 1)).view({H, stage_width_ + 1});
    slot.narrow(1, 0, W).copy_(index.narrow(1, 0, W));
    slot.select(1, stage_width_).copy_(count.clamp_max(W));
  }
  if (compact) {  // the selected rows as the channel stage stores them (recovered when read)
    const ops::CompactSelection sel{index, count,
                                    graph && compact_read_.defined() ? compact_read_[layer] : at::Tensor()};
    return channel_->attend_rows(layer, q, cache, sel, max_rows, graph);
  }
  return ops::decode_attention_gather(q, kv.k, kv.v, offset_dev, index, count, max_rows, G);
}

// The step on the GPU for all KV heads at once: scoring + selection (with the appended entry's page
// recomputed in the same launch), sparse attention. Only a new page or an eviction needs sync().
at::Tensor PagedSelectionBase::attend_fused(int64_t layer, const at::Tensor& q, const KvCache& cache) {
  const LayerKv& kv = cache.layer(layer);
  // Rings attend densely: attend_heads; so do compact keys (a channel stage before) no kernel reads.
  if (!kernels_fit(cache) || kv.has_ring() || (kv.has_compact() && !reads_compact(layer, cache))) return {};
  const at::Tensor heads = ops::upload_heads(kv.has_compact() ? kv.key_bases() : kv.offset, kv.length, q.device());
  if (!pages_.cover_last_page(layer, cache)) pages_.sync(layer, cache);
  const int64_t page = pages_.page(), width = kernel_plan(cache.head_dim()).width;
  int64_t max_pages = 1, max_rows = 1;
  for (int64_t n : kv.length) {
    max_pages = std::max(max_pages, (n + page - 1) / page);
    max_rows = std::max(max_rows, std::min(n, width));
  }
  bytes_last_ += summary_bytes(kv);
  return attend_kernels(layer, q, cache, heads[0], heads[1], max_pages, max_rows, true, false);
}

bool PagedSelectionBase::prepare_graph(const KvCache& cache, int64_t steps) {
  if (!configured_ || !kernels_fit(cache)) return false;
  for (int64_t l = 0; l < cache.n_layer(); ++l)
    if (cache.layer(l).has_ring()) return false;  // the kernels would select inside the rings
  key_bases_.assign(static_cast<size_t>(cache.n_layer()), at::Tensor());
  compact_read_ = at::Tensor();
  for (int64_t l = 0; l < cache.n_layer(); ++l) {
    const LayerKv& kv = cache.layer(l);
    if (kv.window > 0) continue;  // sliding layers attend densely
    pages_.prepare(l, cache, steps);
    if (!kv.has_compact()) continue;
    if (!reads_compact(l, cache)) return false;
    // The rows stay put while the graph runs (DecodeGraph reserves every step's room first).
    key_bases_[l] = ops::upload_int64(kv.key_bases(), kv.k.device());
    if (!compact_read_.defined())
      compact_read_ = at::zeros({cache.n_layer(), cache.n_head_kv()}, key_bases_[l].options());
  }
  const at::Tensor& k = cache.layer(0).k;
  if (k.is_cuda()) {  // the staging buffers the captured step writes its selections into
    stage_width_ = kernel_plan(cache.head_dim()).width;
    n_head_kv_ = cache.n_head_kv();
    const int64_t n = cache.n_layer() * n_head_kv_ * (stage_width_ + 1);
    stage_dev_ = at::zeros({n}, k.options().dtype(at::kInt));
    stage_host_ = at::zeros({n}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
  }
  return true;
}

at::Tensor PagedSelectionBase::attend_device(int64_t layer, const at::Tensor& q, const KvCache& cache,
                                             const at::Tensor& offset_dev, const at::Tensor& length_dev) {
  const at::Tensor& key_base = cache.layer(layer).has_compact() ? key_bases_.at(layer) : offset_dev;
  return attend_kernels(layer, q, cache, key_base, length_dev, pages_.kmin_all(layer).size(1),
                        kernel_plan(cache.head_dim()).width, false, true);
}

void PagedSelectionBase::stage_graph_selections() {
  if (stage_dev_.defined()) stage_host_.copy_(stage_dev_, /*non_blocking=*/true);
}

StepSelections PagedSelectionBase::staged_graph_selections() const {
  StepSelections out;
  if (!stage_host_.defined()) return out;
  const int64_t W = stage_width_, row = W + 1;
  out.n_head_kv = n_head_kv_;
  out.n_layer = stage_host_.numel() / (n_head_kv_ * row);
  const int32_t* p = stage_host_.data_ptr<int32_t>();
  out.offsets.push_back(0);
  for (int64_t i = 0; i < out.n_layer * out.n_head_kv; ++i, p += row) {
    const int64_t k = std::clamp<int64_t>(p[W], 0, W);
    out.rows.insert(out.rows.end(), p, p + k);
    out.offsets.push_back(static_cast<int64_t>(out.rows.size()));
  }
  return out;
}

std::pair<at::Tensor, at::Tensor> PagedSelectionBase::device_selection(int64_t layer) const {
  if (layer < 0 || layer >= static_cast<int64_t>(device_selection_.size())) return {};
  return device_selection_[layer];
}

int64_t PagedSelectionBase::after_graph_step(const KvCache& cache) {
  // The rows each head's selection emitted, as the step staged them (one read: waits for the step).
  const int64_t H = n_head_kv_, row = stage_width_ + 1;
  const at::Tensor counts =
      stage_dev_.defined() ? stage_dev_.view({-1, row}).select(1, stage_width_).contiguous().cpu() : at::Tensor();
  int64_t bytes = 0;
  for (int64_t l = 0; l < cache.n_layer(); ++l) {
    const LayerKv& kv = cache.layer(l);
    const int64_t row_bytes = 2 * kv.v.size(1) * kv.v.element_size();
    if (kv.window > 0) {  // a sliding layer's dense step over its ring
      for (int64_t n : kv.length) bytes += n * row_bytes;
      continue;
    }
    pages_.mark_covered(l, cache);
    bytes += summary_bytes(kv);
    if (!counts.defined()) throw std::logic_error(name() + ": a graph step without its staged selections");
    const int32_t* c = counts.data_ptr<int32_t>() + l * H;
    for (int64_t h = 0; h < H; ++h) bytes += c[h] * row_bytes;
  }
  return bytes;
}

namespace {

constexpr const char* kRef = "Quest (Tang et al. 2024) §3.2-3.3; RocketKV (Behnam et al. 2025) App. A.3";

class Quest : public PagedSelectionBase {
 public:
  explicit Quest(const ParamValues& v)
      : PagedSelectionBase("quest", v), page_(param_int(v, "page")), k_param_(param_int(v, "k")) {}

  void configure(const RunBudget& budget, const ModelConfig& config) override {
    k_ = k_param_ > 0 ? k_param_ : std::max<int64_t>(1, decode_fetch_budget(budget) / 2);
    n_head_ = config.n_head;
    pages_.reset(config.n_layer, page_);
    configured_ = true;
  }

 protected:
  KernelPlan kernel_plan(int64_t) const override { return {false, 0, n_sel(), n_sel() * page_}; }
  // Every page's min and max of a head that selects.
  int64_t summary_bytes(const LayerKv& kv) const override {
    const int64_t D = kv.k.size(1), item = kv.k.element_size();
    int64_t bytes = 0;
    for (const int64_t n : kv.length) {
      const int64_t n_pages = (n + page_ - 1) / page_;
      if (n_sel() < n_pages) bytes += n_pages * 2 * D * item;
    }
    return bytes;
  }
  int64_t n_sel() const { return (k_ + page_ - 1) / page_; }

  at::Tensor attend_pages(int64_t layer, int64_t h0, const at::Tensor& q, const at::Tensor& k,
                          const at::Tensor& v) override {
    const int64_t B = q.size(0), N = k.size(1), D = q.size(2);
    const int64_t n_pages = pages_.n_pages(layer, h0), n_sel = (k_ + page_ - 1) / page_;
    if (n_sel >= n_pages) return attend_selected(h0, q, k, v, {});
    at::Tensor kmax = pages_.kmax(layer, h0, B), kmin = pages_.kmin(layer, h0, B);  // [B, P, D]
    bytes_last_ += B * n_pages * 2 * D * kmax.element_size();
    // max(q·Kmax, q·Kmin) per channel = q⁺·Kmax + q⁻·Kmin (Kmax >= Kmin).
    at::Tensor u = at::bmm(q.clamp_min(0), kmax.to(at::kFloat).transpose(1, 2)) +
                   at::bmm(q.clamp_max(0), kmin.to(at::kFloat).transpose(1, 2));  // [B, G, P]
    at::Tensor sel = topk_stable(u.sum(1), n_sel);                                // [B, n_sel] pages
    at::Tensor rows = (sel.unsqueeze(-1) * page_ + at::arange(page_, sel.options())).view({B, 1, n_sel * page_});
    if (N % page_ == 0) return attend_selected(h0, q, k, v, rows);
    at::Tensor valid = rows.lt(N);  // the last page is partial
    return attend_selected(h0, q, k, v, rows.clamp_max(N - 1), valid);
  }

 private:
  int64_t page_, k_param_, k_ = 0;
};

}  // namespace

PolicyRegistry::Entry quest_entry() {
  return {"quest",
          Stage::kDecodeSelection,
          {int_param("page", 1, 4096, "16",
                     "page size: consecutive cache entries summarised by their element-wise key min/max (RocketKV "
                     "does not state the page size of its Quest baseline; the default 16 is Quest's own)",
                     kRef),
           int_param("k", 0, 1 << 20, "0",
                     "tokens attended per decode step per KV group; ceil(k/page) whole pages are read (0 = t/2: the "
                     "token budget t split evenly between approximation and attention, RocketKV App. A.3)",
                     kRef)},
          "query-aware page selection by min/max key bounds, group-accumulated (Quest, Tang et al. 2024 §3)",
          [](const ParamValues& v) -> std::unique_ptr<Policy> { return std::make_unique<Quest>(v); }};
}

}  // namespace kvscope::policies
