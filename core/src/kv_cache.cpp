#include "kvscope/core/kv_cache.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

#include "ops/cuda_ops.h"

namespace kvscope {

bool LayerKv::has_ring() const {
  for (int64_t w : ring_window)
    if (w > 0) return true;
  return false;
}

std::vector<int64_t> LayerKv::key_bases() const {
  std::vector<int64_t> out;
  for (size_t h = 0; h < offset.size(); ++h) out.push_back(key_row(static_cast<int64_t>(h), 0));
  return out;
}

std::vector<int64_t> LayerKv::value_bases() const {
  std::vector<int64_t> out;
  for (size_t h = 0; h < offset.size(); ++h) out.push_back(value_row(static_cast<int64_t>(h), 0));
  return out;
}

/// The layout of a buffer holding, back to back, rows compact[h].n .. cap[h] - 1 of every head h
/// (all rows without compact entries): base[h] such that row r of head h is base[h] + r. Returns
/// the buffer's rows.
static int64_t tail_layout(const std::vector<int64_t>& cap, const std::vector<CompactKeys>& compact,
                           std::vector<int64_t>& base) {
  int64_t total = 0;
  base.assign(cap.size(), 0);
  for (size_t h = 0; h < cap.size(); ++h) {
    const int64_t skip = compact.empty() ? 0 : compact[h].n;
    base[h] = total - skip;
    total += cap[h] - skip;
  }
  return total;
}

/// The live rows of head h of a buffer laid out as tail_layout says: the compact entries
/// recovered, then the dense rows from `base`.
static at::Tensor live_rows(const at::Tensor& buf, const std::vector<CompactKeys>& compact, int64_t h, int64_t base,
                            int64_t len) {
  const int64_t c = compact.empty() ? 0 : compact[h].n;
  if (c == 0) return buf.narrow(0, base, len);
  const at::Tensor recovered = compact[h].recover();
  return len == c ? recovered : at::cat({recovered, buf.narrow(0, base + c, len - c)});
}

bool LayerKv::uniform() const {
  if (has_ring()) return false;
  for (size_t h = 1; h < length.size(); ++h)
    if (length[h] != length[0] || capacity[h] != capacity[0] || offset[h] != offset[0] + int64_t(h) * capacity[0])
      return false;
  return true;
}

static void require_full_attention(const LayerKv& L, int64_t l, const char* what) {
  if (L.window > 0)
    throw std::logic_error(std::string("KvCache::") + what + ": layer " + std::to_string(l) +
                           " is a sliding-window layer; it keeps its window and is never compressed");
}

KvCache::KvCache(const ModelConfig& c, int64_t capacity, c10::Device device, c10::ScalarType dtype)
    : n_head_kv_(c.n_head_kv), head_dim_(c.head_dim) {
  const auto opts = at::TensorOptions().device(device).dtype(dtype);
  layers_.resize(c.n_layer);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    LayerKv& L = layers_[l];
    L.window = c.window(l);
    // A sliding layer never holds more than its window between forwards (a prompt block grows it).
    const int64_t cap = std::max<int64_t>(L.window > 0 ? std::min(capacity, L.window) : capacity, 1);
    L.k = at::empty({n_head_kv_ * cap, head_dim_}, opts);
    L.v = at::empty({n_head_kv_ * cap, head_dim_}, opts);
    L.pos = at::empty({n_head_kv_ * cap}, opts.dtype(at::kLong));
    for (int64_t h = 0; h < n_head_kv_; ++h) {
      L.offset.push_back(h * cap);
      L.capacity.push_back(cap);
      L.length.push_back(0);
    }
    L.ring_sink.assign(n_head_kv_, 0);
    L.ring_window.assign(n_head_kv_, 0);
    L.ring_next.assign(n_head_kv_, 0);
  }
}

void KvCache::grow(int64_t l, int64_t min_capacity) {
  LayerKv& L = layers_[l];
  int64_t total = 0;
  std::vector<int64_t> cap(n_head_kv_), off(n_head_kv_), k_off, v_off;
  for (int64_t h = 0; h < n_head_kv_; ++h) {
    cap[h] = L.ring_window[h] > 0 ? L.capacity[h] : std::max(min_capacity, 2 * L.capacity[h]);
    if (L.ringed) cap[h] = std::max(min_capacity, std::min(cap[h], L.window));  // a ring never exceeds its window
    off[h] = total;
    total += cap[h];
  }
  // Compact keys / values: k and v hold the rows after each head's compact entries only.
  const int64_t k_total = tail_layout(cap, L.compact, k_off), v_total = tail_layout(cap, L.compact_v, v_off);
  at::Tensor k = at::empty({k_total, head_dim_}, L.k.options()), v = at::empty({v_total, head_dim_}, L.v.options());
  at::Tensor pos = at::empty({total}, L.pos.options());
  for (int64_t h = 0; h < n_head_kv_; ++h) {
    const int64_t n = L.length[h], c = L.compact_entries(h), cv = L.compact_value_entries(h);
    if (n == 0) continue;
    if (n > c) k.narrow(0, k_off[h] + c, n - c).copy_(L.k.narrow(0, L.key_row(h, c), n - c));
    if (n > cv) v.narrow(0, v_off[h] + cv, n - cv).copy_(L.v.narrow(0, L.value_row(h, cv), n - cv));
    pos.narrow(0, off[h], n).copy_(L.pos.narrow(0, L.offset[h], n));
  }
  if (!L.compact.empty()) L.k_offset = k_off;
  if (!L.compact_v.empty()) L.v_offset = v_off;
  L.k = k;
  L.v = v;
  L.pos = pos;
  L.capacity = cap;
  L.offset = off;
}

void KvCache::append_ring(int64_t l, int64_t h, const at::Tensor& k, const at::Tensor& v, const at::Tensor& positions) {
  LayerKv& L = layers_[l];
  const int64_t full = L.ring_sink[h] + L.ring_window[h];
  for (int64_t t = 0; t < k.size(0); ++t) {
    int64_t slot;
    if (L.length[h] < full) {
      slot = L.length[h]++;
    } else {
      slot = L.ring_next[h];
      L.ring_next[h] = L.ring_sink[h] + (slot - L.ring_sink[h] + 1) % L.ring_window[h];
    }
    L.k[L.offset[h] + slot].copy_(k[t]);
    L.v[L.offset[h] + slot].copy_(v[t]);
    L.pos[L.offset[h] + slot].copy_(positions[t]);
  }
}

void KvCache::append_window(int64_t l, const at::Tensor& k, const at::Tensor& v, const at::Tensor& positions) {
  // One token into a ringed sliding-window layer: row position % window, on the device (no sync).
  LayerKv& L = layers_[l];
  const int64_t need = std::min(L.length[0] + 1, L.window);
  if (need > L.capacity[0]) grow(l, need);
  const int64_t cap = L.capacity[0];
  const at::Tensor rows = positions.remainder(L.window);
  L.k.view({n_head_kv_, cap, head_dim_}).index_copy_(1, rows, k);
  L.v.view({n_head_kv_, cap, head_dim_}).index_copy_(1, rows, v);
  L.pos.view({n_head_kv_, cap}).index_copy_(1, rows, positions.unsqueeze(0).expand({n_head_kv_, 1}).contiguous());
  for (int64_t& n : L.length) n = need;
}

void KvCache::ring_window_layer(int64_t l) {
  LayerKv& L = layers_[l];
  if (L.window <= 0 || L.ringed) return;
  L.ringed = true;
  const int64_t n = L.length[0], P = next_position_, W = L.window;
  if (n == 0) return;
  const at::Tensor pos = positions(l).select(0, 0);          // [n], all heads alike
  const at::Tensor idx = pos.ge(P - W).nonzero().flatten();  // the last W positions
  const int64_t m = idx.numel(), cap = P >= W ? W : std::max(P, std::min(L.capacity[0], W));
  const at::Tensor rows = pos.index_select(0, idx).remainder(W);
  at::Tensor k = at::empty({n_head_kv_, cap, head_dim_}, L.k.options());
  at::Tensor v = at::empty({n_head_kv_, cap, head_dim_}, L.v.options());
  at::Tensor p = at::empty({n_head_kv_, cap}, L.pos.options());
  k.index_copy_(1, rows, keys(l).index_select(1, idx));
  v.index_copy_(1, rows, values(l).index_select(1, idx));
  p.index_copy_(1, rows, positions(l).index_select(1, idx));
  L.k = k.view({n_head_kv_ * cap, head_dim_});
  L.v = v.view({n_head_kv_ * cap, head_dim_});
  L.pos = p.view({n_head_kv_ * cap});
  for (int64_t h = 0; h < n_head_kv_; ++h) {
    L.offset[h] = h * cap;
    L.capacity[h] = cap;
    L.length[h] = m;
  }
}

void KvCache::ring_windows() {
  for (int64_t l = 0; l < n_layer(); ++l) ring_window_layer(l);
}

void KvCache::append(int64_t l, const at::Tensor& k, const at::Tensor& v, const at::Tensor& positions) {
  LayerKv& L = layers_[l];
  const int64_t T = k.size(1);
  if (L.window > 0) {
    if (T == 1) {
      ring_window_layer(l);
      append_window(l, k, v, positions);
      return;
    }
    L.ringed = false;  // a block goes in in order; ring_windows folds it back
  }
  int64_t need = 0;
  for (int64_t h = 0; h < n_head_kv_; ++h) need = std::max(need, L.length[h] + T);
  bool fits = true;
  for (int64_t h = 0; h < n_head_kv_; ++h) fits = fits && (L.ring_window[h] > 0 || L.length[h] + T <= L.capacity[h]);
  if (!fits) grow(l, need);
  if (L.uniform() && !L.has_compact()) {
    const int64_t cap = L.capacity[0], n = L.length[0];
    L.k.view({n_head_kv_, cap, head_dim_}).narrow(1, n, T).copy_(k);
    L.v.view({n_head_kv_, cap, head_dim_}).narrow(1, n, T).copy_(v);
    L.pos.view({n_head_kv_, cap}).narrow(1, n, T).copy_(positions.unsqueeze(0).expand({n_head_kv_, T}));
    for (int64_t h = 0; h < n_head_kv_; ++h) L.length[h] += T;
    return;
  }
  for (int64_t h = 0; h < n_head_kv_; ++h) {
    if (L.ring_window[h] > 0) {
      append_ring(l, h, k[h], v[h], positions);
      continue;
    }
    const int64_t at_row = L.offset[h] + L.length[h];
    L.k.narrow(0, L.key_row(h, L.length[h]), T).copy_(k[h]);
    L.v.narrow(0, L.value_row(h, L.length[h]), T).copy_(v[h]);
    L.pos.narrow(0, at_row, T).copy_(positions);
    L.length[h] += T;
  }
}

KvCache KvCache::clone() const {
  KvCache out = *this;
  for (LayerKv& L : out.layers_) {
    L.k = L.k.clone();
    L.v = L.v.clone();
    L.pos = L.pos.clone();
    for (CompactKeys& c : L.compact) c = c.clone();
    for (CompactKeys& c : L.compact_v) c = c.clone();
  }
  return out;
}

void KvCache::retain(int64_t l, const std::vector<at::Tensor>& kept, int64_t reserve) {
  retain(l, kept, std::vector<int64_t>(n_head_kv_, std::max<int64_t>(reserve, 1)));
}

void KvCache::assign_layer(int64_t l, const at::Tensor& k, const at::Tensor& v, const at::Tensor& pos,
                           int64_t reserve) {
  LayerKv& L = layers_[l];
  require_full_attention(L, l, "assign_layer");
  L.compact.clear();  // every entry is replaced
  L.k_offset.clear();
  L.compact_v.clear();
  L.v_offset.clear();
  const int64_t n = k.size(1), cap = n + std::max<int64_t>(reserve, 1);
  L.k = at::empty({n_head_kv_ * cap, head_dim_}, L.k.options());
  L.v = at::empty({n_head_kv_ * cap, head_dim_}, L.v.options());
  L.pos = at::empty({n_head_kv_ * cap}, L.pos.options());
  L.k.view({n_head_kv_, cap, head_dim_}).narrow(1, 0, n).copy_(k);
  L.v.view({n_head_kv_, cap, head_dim_}).narrow(1, 0, n).copy_(v);
  L.pos.view({n_head_kv_, cap}).narrow(1, 0, n).copy_(pos);
  for (int64_t h = 0; h < n_head_kv_; ++h) {
    L.offset[h] = h * cap;
    L.capacity[h] = cap;
    L.length[h] = n;
  }
  L.ring_sink.assign(n_head_kv_, 0);
  L.ring_window.assign(n_head_kv_, 0);
  L.ring_next.assign(n_head_kv_, 0);
}

std::vector<std::vector<std::vector<int32_t>>> KvCache::host_positions() const {
  std::vector<at::Tensor> parts;
  for (const LayerKv& L : layers_)
    for (int64_t h = 0; h < n_head_kv_; ++h) parts.push_back(L.pos.narrow(0, L.offset[h], L.length[h]));
  const at::Tensor all = at::cat(parts).to(at::kInt).to(at::kCPU).contiguous();
  const int32_t* p = all.data_ptr<int32_t>();
  std::vector<std::vector<std::vector<int32_t>>> out(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l)
    for (int64_t h = 0; h < n_head_kv_; ++h) {
      const int64_t n = layers_[l].length[h];
      out[l].emplace_back(p, p + n);
      p += n;
    }
  return out;
}

void KvCache::set_window(int64_t l, int64_t h, int64_t sink, int64_t window) {
  LayerKv& L = layers_[l];
  require_full_attention(L, l, "set_window");
  if (L.has_compact())
    throw std::logic_error("KvCache::set_window: layer " + std::to_string(l) + " holds its keys compactly");
  if (window <= 0 || sink < 0 || L.length[h] > sink + window || L.capacity[h] < sink + window)
    throw std::invalid_argument("KvCache::set_window: layer " + std::to_string(l) + " head " + std::to_string(h) +
                                " holds " + std::to_string(L.length[h]) + " entries in " +
                                std::to_string(L.capacity[h]) + " slots, ring of " + std::to_string(sink) + " + " +
                                std::to_string(window));
  L.ring_sink[h] = sink;
  L.ring_window[h] = window;
  L.ring_next[h] = sink;
}

void KvCache::retain(int64_t l, const std::vector<at::Tensor>& kept, const std::vector<int64_t>& reserve) {
  LayerKv& L = layers_[l];
  require_full_attention(L, l, "retain");
  expand_keys(l);
  if (static_cast<int64_t>(kept.size()) != n_head_kv_)
    throw std::invalid_argument("KvCache::retain: " + std::to_string(kept.size()) + " index sets for " +
                                std::to_string(n_head_kv_) + " KV heads");
  // One gather for the whole layer and one host read (the range check), whatever the head count:
  // a prefill evicts every layer, and a host read per head drains the device queue each time.
  // Row r of the new layout reads row src[r] of the old one: head h's kept rows, then reserve[h]
  // rows whose content does not matter (they are past the head's length until appended to).
  std::vector<int64_t> cap(n_head_kv_), off(n_head_kv_), len(n_head_kv_);
  std::vector<at::Tensor> src, bad;
  int64_t total = 0;
  for (int64_t h = 0; h < n_head_kv_; ++h) {
    const at::Tensor idx = kept[h].to(L.k.device(), at::kLong).flatten();
    len[h] = idx.numel();
    cap[h] = len[h] + reserve[h];
    off[h] = total;
    total += cap[h];
    if (len[h] > 0) bad.push_back(idx.lt(0).logical_or_(idx.ge(L.length[h])).any().view({1}));
    if (cap[h] > 0) src.push_back(at::constant_pad_nd(idx + L.offset[h], {0, reserve[h]}, 0));
  }
  if (!bad.empty()) {
    const at::Tensor flags = at::cat(bad).to(at::kCPU);  // the one host read
    for (int64_t h = 0, i = 0; h < n_head_kv_; ++h)
      if (len[h] > 0 && flags[i++].item<bool>())
        throw std::invalid_argument("KvCache::retain: index out of range for layer " + std::to_string(l) + " head " +
                                    std::to_string(h) + " (" + std::to_string(L.length[h]) + " live entries)");
  }
  if (total == 0 || L.k.size(0) == 0) {
    L.k = at::empty({total, head_dim_}, L.k.options());
    L.v = at::empty({total, head_dim_}, L.v.options());
    L.pos = at::empty({total}, L.pos.options());
  } else {
    const at::Tensor rows = at::cat(src);
    L.k = L.k.index_select(0, rows);
    L.v = L.v.index_select(0, rows);
    L.pos = L.pos.index_select(0, rows);
  }
  L.capacity = cap;
  L.offset = off;
  L.length = len;
  L.ring_sink.assign(n_head_kv_, 0);
  L.ring_window.assign(n_head_kv_, 0);
  L.ring_next.assign(n_head_kv_, 0);
}

bool KvCache::reserve_append(int64_t l, int64_t n) {
  LayerKv& L = layers_[l];
  int64_t need = 0;
  bool fits = true;
  ring_window_layer(l);
  for (int64_t h = 0; h < n_head_kv_; ++h) {
    if (L.ring_window[h] > 0) return false;
    const int64_t after = L.window > 0 ? std::min(L.length[h] + n, L.window) : L.length[h] + n;
    need = std::max(need, after);
    fits = fits && after <= L.capacity[h];
  }
  if (!fits) grow(l, need);
  return true;
}

void KvCache::commit_append(int64_t l, int64_t n) {
  LayerKv& L = layers_[l];
  for (int64_t& len : L.length) len = L.window > 0 ? std::min(len + n, L.window) : len + n;
}

static void require_uniform(const LayerKv& L) {
  if (!L.uniform()) throw std::logic_error("KvCache: dense view of a ragged layer (use the per-head accessors)");
}

/// The capacity per head of uniform, dense-key layer `L` (index l) that an in-place eviction `op` of
/// n live entries rewrites; throws std::logic_error otherwise.
static int64_t in_place_capacity(const LayerKv& L, int64_t l, int64_t n, const char* op) {
  require_uniform(L);
  if (L.has_compact())
    throw std::logic_error(std::string("KvCache::") + op + ": layer " + std::to_string(l) +
                           " holds its keys compactly");
  const int64_t cap = L.capacity[0];
  if (n < 1 || n > cap)
    throw std::logic_error(std::string("KvCache::") + op + ": " + std::to_string(n) +
                           " live entries in a capacity of " + std::to_string(cap));
  return cap;
}

/// In each of the rows of `live` ([rows, n] or [rows, n, width], a view into a buffer), moves the
/// entries after drop[r] (int64 [rows], each in [0, n)) down one place, in place, keeping their
/// order; entry n - 1 keeps its old value: KvCache::drop_lowest's LibTorch path.
static void shift_out(const at::Tensor& live, const at::Tensor& drop) {
  const int64_t rows = live.size(0), n = live.size(1);
  // Entry j of the result reads entry j + (j >= drop[r]): a gather, then one copy back.
  const at::Tensor j = at::arange(n - 1, drop.options()).unsqueeze(0);  // [1, n-1]
  at::Tensor src = j + (j >= drop.reshape({rows, 1})).to(at::kLong);    // [rows, n-1]
  if (live.dim() == 3) src = src.unsqueeze(2).expand({rows, n - 1, live.size(2)});
  live.narrow(1, 0, n - 1).copy_(live.gather(1, src));
}

void KvCache::drop_lowest(int64_t l, const at::Tensor& scores, int64_t n, const at::Tensor& length, int64_t candidates,
                          const at::Tensor& alongside) {
  const LayerKv& L = layers_[l];
  const int64_t cap = in_place_capacity(L, l, n, "drop_lowest");
  if (scores.dim() != 2 || scores.size(0) != n_head_kv_ || scores.size(1) != n)
    throw std::invalid_argument("KvCache::drop_lowest: scores must be [" + std::to_string(n_head_kv_) + ", " +
                                std::to_string(n) + "]");
  if (candidates < 0 || candidates > n)
    throw std::invalid_argument("KvCache::drop_lowest: " + std::to_string(candidates) + " candidates of " +
                                std::to_string(n) + " entries");
  if (alongside.defined() && (alongside.dim() != 2 || alongside.size(0) != n_head_kv_ || alongside.size(1) < n))
    throw std::invalid_argument("KvCache::drop_lowest: alongside must be [" + std::to_string(n_head_kv_) +
                                ", >= " + std::to_string(n) + "]");
  if (L.k.is_cuda() && ops::drop_lowest_supported(L.k, head_dim_)) {
    const at::Tensor s =
        scores.scalar_type() == at::kFloat && scores.is_contiguous() ? scores : scores.to(at::kFloat).contiguous();
    ops::drop_lowest(s, L.k, L.v, L.pos, cap, length, candidates, alongside);
    return;
  }
  const at::Tensor drop = scores.narrow(1, 0, candidates > 0 ? candidates : n).argmin(1);
  shift_out(L.k.view({n_head_kv_, cap, head_dim_}).narrow(1, 0, n), drop);
  shift_out(L.v.view({n_head_kv_, cap, head_dim_}).narrow(1, 0, n), drop);
  shift_out(L.pos.view({n_head_kv_, cap}).narrow(1, 0, n), drop);
  if (alongside.defined()) shift_out(alongside.narrow(1, 0, n), drop);
  if (length.defined()) length.sub_(1);
}

void KvCache::keep_in_place(int64_t l, const at::Tensor& kept, int64_t n, const at::Tensor& length) {
  const LayerKv& L = layers_[l];
  const int64_t cap = in_place_capacity(L, l, n, "keep_in_place");
  if (kept.dim() != 2 || kept.size(0) != n_head_kv_ || kept.size(1) > n)
    throw std::invalid_argument("KvCache::keep_in_place: kept must be [" + std::to_string(n_head_kv_) +
                                ", m <= " + std::to_string(n) + "]");
  const int64_t m = kept.size(1);
  const at::Tensor idx = kept.to(L.pos.device(), at::kLong);
  const at::Tensor pos = L.pos.view({n_head_kv_, cap});
  pos.narrow(1, 0, m).copy_(pos.narrow(1, 0, n).gather(1, idx));
  const at::Tensor rows = idx.unsqueeze(2).expand({n_head_kv_, m, head_dim_});
  for (const at::Tensor& t : {L.k, L.v}) {
    const at::Tensor live = t.view({n_head_kv_, cap, head_dim_});
    live.narrow(1, 0, m).copy_(live.narrow(1, 0, n).gather(1, rows));
  }
  if (length.defined()) length.sub_(n - m);
}

void KvCache::commit_drop(int64_t l, int64_t count) {
  for (int64_t& len : layers_[l].length) {
    if (len < count)
      throw std::logic_error("KvCache::commit_drop: a head of layer " + std::to_string(l) + " holds " +
                             std::to_string(len) + " entries, fewer than " + std::to_string(count));
    len -= count;
  }
}

at::Tensor KvCache::keys(int64_t l) const {
  const LayerKv& L = layers_[l];
  require_uniform(L);
  if (!L.compact.empty()) {  // recovered: a new tensor
    std::vector<at::Tensor> heads;
    for (int64_t h = 0; h < n_head_kv_; ++h) heads.push_back(head_keys(l, h));
    return at::stack(heads);
  }
  return L.k.view({n_head_kv_, L.capacity[0], head_dim_}).narrow(1, 0, L.length[0]);
}
at::Tensor KvCache::values(int64_t l) const {
  const LayerKv& L = layers_[l];
  require_uniform(L);
  if (!L.compact_v.empty()) {
    std::vector<at::Tensor> heads;
    for (int64_t h = 0; h < n_head_kv_; ++h) heads.push_back(head_values(l, h));
    return at::stack(heads);
  }
  return L.v.view({n_head_kv_, L.capacity[0], head_dim_}).narrow(1, 0, L.length[0]);
}
at::Tensor KvCache::positions(int64_t l) const {
  const LayerKv& L = layers_[l];
  require_uniform(L);
  return L.pos.view({n_head_kv_, L.capacity[0]}).narrow(1, 0, L.length[0]);
}
at::Tensor KvCache::head_keys(int64_t l, int64_t h) const {
  const LayerKv& L = layers_[l];
  return live_rows(L.k, L.compact, h, L.key_row(h, 0), L.length[h]);
}
at::Tensor KvCache::head_values(int64_t l, int64_t h) const {
  const LayerKv& L = layers_[l];
  return live_rows(L.v, L.compact_v, h, L.value_row(h, 0), L.length[h]);
}
at::Tensor KvCache::head_positions(int64_t l, int64_t h) const {
  const LayerKv& L = layers_[l];
  return L.pos.narrow(0, L.offset[h], L.length[h]);
}

int64_t KvCache::bytes_allocated() const {
  int64_t b = 0;
  for (const auto& L : layers_) {
    b += (L.k.numel() + L.v.numel()) * L.k.element_size();
    for (const CompactKeys& c : L.compact) b += c.bytes();
    for (const CompactKeys& c : L.compact_v) b += c.bytes();
  }
  return b;
}

int64_t KvCache::bytes_live() const {
  int64_t b = 0;
  for (const auto& L : layers_)
    for (int64_t h = 0; h < n_head_kv_; ++h) {
      const int64_t n = L.length[h], c = L.compact_entries(h), cv = L.compact_value_entries(h);
      b += (2 * n - c - cv) * head_dim_ * L.k.element_size() + (c > 0 ? L.compact[h].bytes() : 0) +
           (cv > 0 ? L.compact_v[h].bytes() : 0);
    }
  return b;
}

void KvCache::compact_keys(int64_t l, std::vector<CompactKeys> heads, std::vector<CompactKeys> values) {
  LayerKv& L = layers_[l];
  require_full_attention(L, l, "compact_keys");
  const std::string where = "KvCache::compact_keys: layer " + std::to_string(l);
  if (L.has_ring()) throw std::logic_error(where + " has ring-buffer heads, which overwrite rows in place");
  if (!L.compact.empty()) throw std::logic_error(where + " holds its keys compactly already");
  if (static_cast<int64_t>(heads.size()) != n_head_kv_)
    throw std::invalid_argument(where + ": " + std::to_string(heads.size()) + " heads for " +
                                std::to_string(n_head_kv_) + " KV heads");
  for (int64_t h = 0; h < n_head_kv_; ++h)
    if (heads[h].n != L.length[h] || heads[h].head_dim != head_dim_)
      throw std::invalid_argument(where + " head " + std::to_string(h) + ": " + std::to_string(heads[h].n) +
                                  " compact entries of head_dim " + std::to_string(heads[h].head_dim) + " for " +
                                  std::to_string(L.length[h]) + " live entries of head_dim " +
                                  std::to_string(head_dim_));
  if (!values.empty()) {
    if (static_cast<int64_t>(values.size()) != n_head_kv_)
      throw std::invalid_argument(where + ": " + std::to_string(values.size()) + " compact value heads for " +
                                  std::to_string(n_head_kv_) + " KV heads");
    for (int64_t h = 0; h < n_head_kv_; ++h)
      if (values[h].n != heads[h].n || values[h].head_dim != head_dim_)
        throw std::invalid_argument(where + " head " + std::to_string(h) + ": " + std::to_string(values[h].n) +
                                    " compact values for " + std::to_string(heads[h].n) + " compact keys");
    // No dense value is live either: nothing to copy.
    L.v = at::empty({tail_layout(L.capacity, values, L.v_offset), head_dim_}, L.v.options());
    L.compact_v = std::move(values);
  }
  L.k = at::empty({tail_layout(L.capacity, heads, L.k_offset), head_dim_}, L.k.options());  // no dense key is live
  L.compact = std::move(heads);
}

void KvCache::expand_keys(int64_t l) {
  LayerKv& L = layers_[l];
  if (!L.has_compact()) return;
  const int64_t rows = L.pos.size(0);  // the positions keep the layout of the offsets
  at::Tensor k = at::empty({rows, head_dim_}, L.k.options()), v = at::empty({rows, head_dim_}, L.v.options());
  for (int64_t h = 0; h < n_head_kv_; ++h)
    if (L.length[h] > 0) {
      k.narrow(0, L.offset[h], L.length[h]).copy_(head_keys(l, h));
      v.narrow(0, L.offset[h], L.length[h]).copy_(head_values(l, h));
    }
  L.k = k;
  L.v = v;
  L.compact.clear();
  L.k_offset.clear();
  L.compact_v.clear();
  L.v_offset.clear();
}

}  // namespace kvscope
