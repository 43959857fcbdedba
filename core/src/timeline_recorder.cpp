#include "kvscope/core/timeline_recorder.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

#include "kvscope/core/errors.h"

namespace kvscope {
namespace {
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<int64_t> to_vector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}
}  // namespace

TimelineRecorder::TimelineRecorder(int64_t n_layer, int64_t n_head_kv, int64_t max_positions, int64_t max_steps,
                                   TimelineOptions o)
    : o_(std::move(o)) {
  t_.n_layer = n_layer;
  t_.n_head_kv = n_head_kv;
  t_.page = std::max<int64_t>(1, o_.page);
  pinned_.assign(static_cast<size_t>(n_layer * n_head_kv), 0);
  for (const auto& [l, h] : o_.pinned) {
    if (l < 0 || l >= n_layer || h < 0 || h >= n_head_kv)
      throw InputError("pinned head " + std::to_string(l) + ":" + std::to_string(h) + " is outside the model (" +
                       std::to_string(n_layer) + " layers x " + std::to_string(n_head_kv) + " KV heads)");
    pinned_[static_cast<size_t>(l * n_head_kv + h)] = 1;
  }
  const double token_bytes = double(n_layer) * double(n_head_kv) * double(max_positions) * double(max_steps) / 8.0;
  all_tokens_ = token_bytes <= double(o_.all_tokens_bytes);
  rows_.assign(static_cast<size_t>(n_layer), std::vector<std::vector<int32_t>>(static_cast<size_t>(n_head_kv)));
  layer_step_.assign(static_cast<size_t>(n_layer), 0);
  t_.pages.resize(static_cast<size_t>(n_layer));
  t_.tokens.resize(static_cast<size_t>(n_layer));
  t_.exact.resize(static_cast<size_t>(n_layer));
  grow_positions(std::max<int64_t>(max_positions, 1));
}

void TimelineRecorder::grow_positions(int64_t n) {
  if (n <= cap_positions_) return;
  const int64_t cap = std::max(n, 2 * cap_positions_), LH = t_.n_layer * t_.n_head_kv;
  std::vector<int32_t> at(static_cast<size_t>(LH * cap), -1);
  std::vector<uint8_t> by(static_cast<size_t>(LH * cap), 0);
  for (int64_t i = 0; i < LH; ++i)
    for (int64_t p = 0; p < cap_positions_; ++p) {
      at[i * cap + p] = t_.evicted_at[i * cap_positions_ + p];
      by[i * cap + p] = t_.evicted_by[i * cap_positions_ + p];
    }
  t_.evicted_at.swap(at);
  t_.evicted_by.swap(by);
  t_.entered_at.resize(static_cast<size_t>(cap), 0);
  cap_positions_ = cap;
}

void TimelineRecorder::evict(int64_t layer, int64_t head, int64_t position, EvictionCause cause) {
  const size_t i = static_cast<size_t>((layer * t_.n_head_kv + head) * cap_positions_ + position);
  t_.evicted_at[i] = static_cast<int32_t>(step_);
  t_.evicted_by[i] = static_cast<uint8_t>(cause);
}

void TimelineRecorder::begin_step() {
  flush_recall();
  ++step_;
  if (o_.recall) t_.recall.resize(t_.recall.size() + static_cast<size_t>(t_.n_layer * t_.n_head_kv), kNaN);
}

void TimelineRecorder::after_prefill(const std::vector<std::vector<std::vector<int32_t>>>& live_positions,
                                     int64_t first, int64_t n) {
  grow_positions(first + n);
  for (int64_t p = first; p < first + n; ++p) t_.entered_at[p] = static_cast<int32_t>(step_);
  const int64_t L = t_.n_layer, H = t_.n_head_kv;
  const EvictionCause cause = step_ == 0 ? EvictionCause::kPrefill : EvictionCause::kTurn;
  std::vector<uint8_t> live;
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t h = 0; h < H; ++h) {
      const std::vector<int32_t>& now = live_positions.at(l).at(h);
      std::vector<int32_t>& rows = rows_[l][h];
      // The live set is drawn from what was live and the block: as large as both, nothing left.
      if (static_cast<int64_t>(now.size()) != static_cast<int64_t>(rows.size()) + n) {
        live.assign(static_cast<size_t>(first + n), 0);
        for (int32_t p : now)
          if (p >= 0 && p < first + n) live[p] = 1;
        for (int32_t p : rows)
          if (!live[p]) evict(l, h, p, cause);
        for (int64_t p = first; p < first + n; ++p)
          if (!live[p]) evict(l, h, p, cause);
      }
      rows = now;
    }
    layer_step_[l] = step_;
  }
}

void TimelineRecorder::after_decode_eviction(const KvCache& cache, int64_t layer) {
  const LayerKv& kv = cache.layer(layer);
  for (int64_t h = 0; h < t_.n_head_kv; ++h) {
    std::vector<int32_t>& rows = rows_[layer][h];
    if (kv.length[h] == static_cast<int64_t>(rows.size())) continue;  // nothing left this head
    const at::Tensor p = cache.head_positions(layer, h).to(at::kCPU, at::kInt).contiguous();
    std::vector<int32_t> now(p.data_ptr<int32_t>(), p.data_ptr<int32_t>() + p.numel());
    std::vector<int32_t> sorted = now;
    std::sort(sorted.begin(), sorted.end());
    for (int32_t r : rows)
      if (!std::binary_search(sorted.begin(), sorted.end(), r)) evict(layer, h, r, EvictionCause::kDecode);
    rows = std::move(now);
  }
}

void TimelineRecorder::after_layer(const KvCache& cache, int64_t layer, int64_t position) {
  if (layer_step_[layer] == step_) return;
  layer_step_[layer] = step_;
  grow_positions(position + 1);
  t_.entered_at[position] = static_cast<int32_t>(step_);
  const LayerKv& kv = cache.layer(layer);
  for (int64_t h = 0; h < t_.n_head_kv; ++h) {
    std::vector<int32_t>& rows = rows_[layer][h];
    if (kv.length[h] > static_cast<int64_t>(rows.size())) {
      rows.push_back(static_cast<int32_t>(position));
    } else if (kv.window > 0) {  // a sliding-window layer: row position % window was just overwritten
      const auto slot = static_cast<size_t>(position % kv.window);
      evict(layer, h, rows[slot], EvictionCause::kRing);
      rows[slot] = static_cast<int32_t>(position);
    } else if (kv.ring_window[h] > 0) {  // the slot before the ring's cursor was just overwritten
      const int64_t S = kv.ring_sink[h], W = kv.ring_window[h];
      const int64_t slot = S + (kv.ring_next[h] - S - 1 + W) % W;
      evict(layer, h, rows[slot], EvictionCause::kRing);
      rows[slot] = static_cast<int32_t>(position);
    }
  }
}

void TimelineRecorder::after_decode(const KvCache& cache, int64_t position) {
  for (int64_t l = 0; l < t_.n_layer; ++l) after_layer(cache, l, position);
}

std::vector<int64_t> TimelineRecorder::ranks_of(int64_t layer, int64_t h, bool ring, std::vector<int64_t> rows) const {
  const std::vector<int32_t>& map = rows_[layer][h];
  const int64_t n = static_cast<int64_t>(map.size());
  for (int64_t r : rows)
    if (r < 0 || r >= n) throw std::logic_error("timeline: selected row outside the head's cache");
  if (ring) {  // ring slots -> ranks of their positions
    std::vector<int64_t> order(static_cast<size_t>(n)), rank(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return map[a] < map[b]; });
    for (int64_t r = 0; r < n; ++r) rank[order[r]] = r;
    for (int64_t& s : rows) s = rank[static_cast<size_t>(s)];
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

void TimelineRecorder::record_head(const KvCache& cache, int64_t layer, int64_t h, std::vector<int64_t> sel) {
  const int64_t n = static_cast<int64_t>(rows_[layer][h].size());
  sel = ranks_of(layer, h, cache.layer(layer).ring_window[h] > 0, std::move(sel));
  std::vector<int64_t> page_set;
  for (int64_t r : sel)
    if (page_set.empty() || page_set.back() != r / t_.page) page_set.push_back(r / t_.page);
  t_.pages[layer].append((n + t_.page - 1) / t_.page, page_set);
  if (per_token(layer, h))
    t_.tokens[layer].append(n, sel);
  else
    t_.tokens[layer].pad_to(t_.tokens[layer].entries() + 1);
}

void TimelineRecorder::on_exact(const KvCache& cache, int64_t layer, int64_t head, std::vector<int64_t> rows) {
  if (step_ < 1) return;
  if (layer < 0 || layer >= t_.n_layer || head < 0 || head >= t_.n_head_kv)
    throw std::logic_error("timeline: exact top-k of a head outside the record");
  record_exact(layer, head, cache.layer(layer).ring_window[head] > 0, std::move(rows));
}

void TimelineRecorder::record_exact(int64_t layer, int64_t h, bool ring, std::vector<int64_t> rows) {
  SelectionBits& b = t_.exact[layer];
  const int64_t entry = (step_ - 1) * t_.n_head_kv + h;
  if (b.entries() > entry)
    throw std::logic_error("timeline: exact top-k of layer " + std::to_string(layer) + " head " + std::to_string(h) +
                           " given twice (or after a later head) at step " + std::to_string(step_));
  const std::vector<int64_t> ranks = ranks_of(layer, h, ring, std::move(rows));
  b.pad_to(entry);
  b.append(static_cast<int64_t>(rows_[layer][h].size()), ranks);
}

void TimelineRecorder::on_selections(const KvCache& cache, const StepSelections& s) {
  if (step_ < 1 || s.empty() || s.n_head_kv != t_.n_head_kv) return;
  const int64_t H = t_.n_head_kv;
  std::vector<int64_t> sel;
  for (int64_t l = 0; l < std::min(s.n_layer, t_.n_layer); ++l) {
    if (cache.layer(l).window > 0) continue;  // a sliding layer attends densely: no selection
    t_.pages[l].pad_to((step_ - 1) * H);
    t_.tokens[l].pad_to((step_ - 1) * H);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t i = l * H + h;
      sel.assign(s.rows.begin() + s.offsets[i], s.rows.begin() + s.offsets[i + 1]);
      record_head(cache, l, h, sel);
    }
  }
}

void TimelineRecorder::on_selection(const KvCache& cache, int64_t layer, const std::vector<at::Tensor>& rows,
                                    const at::Tensor& q) {
  if (step_ < 1) return;
  const int64_t H = t_.n_head_kv, G = q.defined() ? q.size(0) / H : 1;
  const int64_t entry = (step_ - 1) * H;
  t_.pages[layer].pad_to(entry);
  t_.tokens[layer].pad_to(entry);
  for (int64_t h = 0; h < H; ++h) {
    const int64_t n = static_cast<int64_t>(rows_[layer][h].size());
    if (h >= static_cast<int64_t>(rows.size()) || !rows[h].defined()) {
      t_.pages[layer].pad_to(entry + h + 1);
      t_.tokens[layer].pad_to(entry + h + 1);
      continue;
    }
    record_head(cache, layer, h, to_vector(rows[h]));  // [1, k] or [G, k]: the union is what was read

    // Recall of the exact top-k over the head's live keys (k = entries selected).
    const int64_t k = rows[h].size(-1);
    if (!o_.recall || !q.defined() || k == 0 || k >= n) continue;
    const at::Tensor keys = cache.head_keys(layer, h).to(at::kFloat);
    const at::Tensor logits = at::matmul(q.narrow(0, h * G, G).to(at::kFloat), keys.t());  // [G, n]
    const at::Tensor r = rows[h].to(keys.device(), at::kLong);
    at::Tensor value;
    at::Tensor exact;
    if (r.size(0) == 1) {
      exact = std::get<1>(logits.sum(0).topk(k));  // [k]
      value = at::isin(r[0], exact).sum().to(at::kFloat) / float(k);
    } else {
      // One selection per query head: each against its own exact top-k.
      exact = std::get<1>(logits.topk(k, -1));  // [G, k]
      value = (r.unsqueeze(-1) == exact.unsqueeze(1)).any(-1).sum().to(at::kFloat) / float(k * r.size(0));
    }
    pending_recall_.emplace_back(static_cast<size_t>(((step_ - 1) * t_.n_layer + layer) * H + h), value);
    if (per_token(layer, h))
      pending_exact_.push_back({layer, h, cache.layer(layer).ring_window[h] > 0, exact.reshape({-1})});
  }
}

void TimelineRecorder::flush_recall() {
  step_recall_.clear();
  if (!pending_exact_.empty()) {  // one read for every head's top-k, in the order they came
    std::vector<at::Tensor> v;
    for (const PendingExact& e : pending_exact_) v.push_back(e.rows);
    const std::vector<int64_t> host = to_vector(at::cat(v));
    size_t at = 0;
    for (const PendingExact& e : pending_exact_) {
      const size_t n = static_cast<size_t>(e.rows.numel());
      record_exact(e.layer, e.head, e.ring, std::vector<int64_t>(host.begin() + at, host.begin() + at + n));
      at += n;
    }
    pending_exact_.clear();
  }
  if (pending_recall_.empty()) return;
  std::vector<at::Tensor> v;
  for (auto& [i, t] : pending_recall_) v.push_back(t.view({1}));
  const at::Tensor host = at::cat(v).to(at::kCPU).contiguous();
  for (size_t j = 0; j < pending_recall_.size(); ++j) {
    t_.recall[pending_recall_[j].first] = host.data_ptr<float>()[j];
    step_recall_.push_back(host.data_ptr<float>()[j]);
  }
  pending_recall_.clear();
}

std::optional<double> TimelineRecorder::on_recall(const std::vector<float>& values) {
  if (!o_.recall || step_ < 1) return std::nullopt;
  const int64_t LH = t_.n_layer * t_.n_head_kv;
  if (static_cast<int64_t>(values.size()) != LH)
    throw std::invalid_argument("timeline: " + std::to_string(values.size()) + " recall values for " +
                                std::to_string(LH) + " (layer, KV head) pairs");
  std::copy(values.begin(), values.end(), t_.recall.begin() + (step_ - 1) * LH);
  double sum = 0;
  int64_t n = 0;
  for (float r : values)
    if (std::isfinite(r)) sum += r, ++n;
  if (n == 0) return std::nullopt;
  return sum / double(n);
}

std::optional<double> TimelineRecorder::step_recall_mean() {
  flush_recall();
  if (step_recall_.empty()) return std::nullopt;
  return std::accumulate(step_recall_.begin(), step_recall_.end(), 0.0) / double(step_recall_.size());
}

Timeline TimelineRecorder::finish(int64_t n_positions) {
  flush_recall();
  grow_positions(n_positions);
  return compact(std::move(t_), n_positions);
}

Timeline TimelineRecorder::snapshot(int64_t n_positions) const {
  Timeline t = t_;
  if (n_positions > cap_positions_) n_positions = cap_positions_;
  if (!t.recall.empty()) t.recall.resize(static_cast<size_t>(step_ * t.n_layer * t.n_head_kv));
  return compact(std::move(t), n_positions);
}

Timeline TimelineRecorder::compact(Timeline out, int64_t n_positions) const {
  out.n_positions = n_positions;
  out.n_steps = step_;
  const int64_t LH = out.n_layer * out.n_head_kv;
  std::vector<int32_t> at(static_cast<size_t>(LH * n_positions));
  std::vector<uint8_t> by(at.size());
  for (int64_t i = 0; i < LH; ++i) {
    std::copy_n(out.evicted_at.begin() + i * cap_positions_, n_positions, at.begin() + i * n_positions);
    std::copy_n(out.evicted_by.begin() + i * cap_positions_, n_positions, by.begin() + i * n_positions);
  }
  out.evicted_at.swap(at);
  out.evicted_by.swap(by);
  out.entered_at.resize(static_cast<size_t>(n_positions));
  bool any_tokens = false, any_pages = false, any_exact = false;
  for (int64_t l = 0; l < out.n_layer; ++l) {
    out.pages[l].pad_to(step_ * out.n_head_kv);
    out.tokens[l].pad_to(step_ * out.n_head_kv);
    out.exact[l].pad_to(step_ * out.n_head_kv);
    any_tokens = any_tokens || !out.tokens[l].bits.empty();
    any_pages = any_pages || !out.pages[l].bits.empty();
    any_exact = any_exact || !out.exact[l].bits.empty();
  }
  if (!any_tokens) out.tokens.clear();
  if (!any_pages) out.pages.clear();
  if (!any_exact) out.exact.clear();
  return out;
}

}  // namespace kvscope
