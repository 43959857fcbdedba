#include "kvscope/core/timeline.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>

namespace kvscope {

std::string_view to_string(EvictionCause c) {
  switch (c) {
    case EvictionCause::kNone:
      return "none";
    case EvictionCause::kPrefill:
      return "prefill";
    case EvictionCause::kRing:
      return "ring";
    case EvictionCause::kTurn:
      return "turn";
    case EvictionCause::kDecode:
      return "decode";
  }
  return "unknown";
}

int64_t SelectionBits::size(int64_t e) const {
  if (e < 0 || e + 1 >= static_cast<int64_t>(offsets.size())) return 0;
  return offsets[e + 1] - offsets[e];
}

void SelectionBits::append(int64_t n_units, const std::vector<int64_t>& set) {
  const size_t start = bits.size();
  bits.resize(start + static_cast<size_t>((n_units + 7) / 8), 0);
  for (int64_t u : set) {
    if (u < 0 || u >= n_units) throw std::out_of_range("SelectionBits::append: unit outside the entry");
    bits[start + static_cast<size_t>(u / 8)] |= static_cast<uint8_t>(1u << (u % 8));
  }
  offsets.push_back(static_cast<int64_t>(bits.size()));
}

void SelectionBits::pad_to(int64_t n) {
  while (entries() < n) offsets.push_back(offsets.back());
}

namespace {
void check_index(const Timeline& t, int64_t layer, int64_t head, int64_t position, int64_t step) {
  if (layer < 0 || layer >= t.n_layer || head < 0 || head >= t.n_head_kv)
    throw std::out_of_range("timeline: layer " + std::to_string(layer) + " head " + std::to_string(head) +
                            " outside the record (" + std::to_string(t.n_layer) + " layers x " +
                            std::to_string(t.n_head_kv) + " KV heads)");
  if (position >= 0 && position >= t.n_positions)  // -1: no position to check
    throw std::out_of_range("timeline: position " + std::to_string(position) + " outside the record (" +
                            std::to_string(t.n_positions) + " positions)");
  if (step < 0 || step > t.n_steps)
    throw std::out_of_range("timeline: step " + std::to_string(step) + " outside 0 .. " + std::to_string(t.n_steps));
}

size_t row_base(const Timeline& t, int64_t layer, int64_t head) {
  return static_cast<size_t>((layer * t.n_head_kv + head) * t.n_positions);
}

std::vector<int64_t> set_bits(const uint8_t* b, int64_t n_bytes) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n_bytes; ++i)
    for (uint8_t v = b[i]; v; v &= static_cast<uint8_t>(v - 1)) out.push_back(i * 8 + __builtin_ctz(v));
  return out;
}
}  // namespace

int32_t Timeline::evicted_step(int64_t layer, int64_t head, int64_t position) const {
  check_index(*this, layer, head, position, 0);
  if (position < 0) throw std::out_of_range("timeline: negative position");
  return evicted_at[row_base(*this, layer, head) + static_cast<size_t>(position)];
}

std::vector<int64_t> Timeline::live_positions(int64_t layer, int64_t head, int64_t step) const {
  check_index(*this, layer, head, -1, step);
  const size_t base = row_base(*this, layer, head);
  std::vector<int64_t> out;
  for (int64_t p = 0; p < n_positions; ++p) {
    const int32_t e = evicted_at[base + p];
    if (entered_at[p] <= step && (e < 0 || e > step)) out.push_back(p);
  }
  return out;
}

bool Timeline::has_tokens(int64_t layer, int64_t head, int64_t step) const {
  check_index(*this, layer, head, -1, step);
  if (step < 1 || tokens.empty()) return false;
  return tokens[layer].size((step - 1) * n_head_kv + head) > 0;
}

std::optional<std::vector<std::pair<int64_t, int64_t>>> Timeline::selected_ranks(int64_t layer, int64_t head,
                                                                                 int64_t step, int64_t n_live,
                                                                                 bool* token) const {
  check_index(*this, layer, head, -1, step);
  if (step < 1) return std::nullopt;
  const int64_t e = (step - 1) * n_head_kv + head;
  const bool per_token = has_tokens(layer, head, step);
  if (token) *token = per_token;
  const SelectionBits* s = per_token ? &tokens[layer] : (pages.empty() ? nullptr : &pages[layer]);
  if (!s || s->size(e) == 0) return std::nullopt;
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t u : set_bits(s->bits.data() + s->offsets[e], s->size(e))) {
    const int64_t a = per_token ? u : u * page, b = std::min(n_live, per_token ? u + 1 : (u + 1) * page);
    if (a >= b) continue;
    if (!out.empty() && out.back().second == a)
      out.back().second = b;
    else
      out.emplace_back(a, b);
  }
  return out;
}

bool Timeline::has_exact(int64_t layer, int64_t head, int64_t step) const {
  check_index(*this, layer, head, -1, step);
  if (step < 1 || exact.empty()) return false;
  return exact[layer].size((step - 1) * n_head_kv + head) > 0;
}

std::optional<std::vector<int64_t>> Timeline::exact_positions(int64_t layer, int64_t head, int64_t step,
                                                              const std::vector<int64_t>* live) const {
  if (!has_exact(layer, head, step)) return std::nullopt;
  std::vector<int64_t> own;
  if (!live) live = &(own = live_positions(layer, head, step));
  const int64_t e = (step - 1) * n_head_kv + head;
  const SelectionBits& s = exact[layer];
  std::vector<int64_t> out;
  for (int64_t r : set_bits(s.bits.data() + s.offsets[e], s.size(e))) {
    if (r >= static_cast<int64_t>(live->size())) break;  // ascending: the rest are past the live set too
    out.push_back((*live)[r]);
  }
  return out;
}

std::optional<std::vector<int64_t>> Timeline::selected_positions(int64_t layer, int64_t head, int64_t step,
                                                                 const std::vector<int64_t>* live) const {
  std::vector<int64_t> own;
  if (!live) live = &(own = live_positions(layer, head, step));
  const auto ranges = selected_ranks(layer, head, step, static_cast<int64_t>(live->size()));
  if (!ranges) return std::nullopt;
  std::vector<int64_t> out;
  for (const auto& [a, b] : *ranges)
    for (int64_t r = a; r < b; ++r) out.push_back((*live)[r]);
  return out;
}

float Timeline::recall_at(int64_t step, int64_t layer, int64_t head) const {
  if (recall.empty() || step < 1 || step > n_steps || layer < 0 || layer >= n_layer || head < 0 || head >= n_head_kv)
    return std::numeric_limits<float>::quiet_NaN();
  return recall[static_cast<size_t>(((step - 1) * n_layer + layer) * n_head_kv + head)];
}

std::string Timeline::check() const {
  if (n_layer < 0 || n_head_kv < 0 || n_positions < 0 || n_steps < 0 || page < 1) return "negative sizes or page < 1";
  const size_t cells = static_cast<size_t>(n_layer * n_head_kv * n_positions);
  if (entered_at.size() != static_cast<size_t>(n_positions))
    return "entered_at holds " + std::to_string(entered_at.size()) + " values for " + std::to_string(n_positions) +
           " positions";
  if (evicted_at.size() != cells || evicted_by.size() != cells)
    return "evicted_at / evicted_by hold " + std::to_string(evicted_at.size()) + " / " +
           std::to_string(evicted_by.size()) + " values, expected " + std::to_string(cells);
  for (int32_t e : entered_at)
    if (e < 0 || e > n_steps)
      return "entered_at step " + std::to_string(e) + " outside 0 .. " + std::to_string(n_steps);
  for (size_t i = 0; i < evicted_at.size(); ++i) {
    const int32_t e = evicted_at[i], in = entered_at[i % static_cast<size_t>(n_positions)];
    if (e < -1 || e > n_steps)
      return "evicted_at step " + std::to_string(e) + " outside -1 .. " + std::to_string(n_steps);
    if (e >= 0 && e < in)
      return "position " + std::to_string(i % static_cast<size_t>(n_positions)) + " evicted at step " +
             std::to_string(e) + " before it entered at step " + std::to_string(in);
  }
  for (const auto& [sel, name] :
       {std::pair{&pages, "selections"}, std::pair{&tokens, "selections"}, std::pair{&exact, "exact top-k records"}}) {
    if (!sel->empty() && static_cast<int64_t>(sel->size()) != n_layer) return std::string(name) + " not one per layer";
    for (const SelectionBits& b : *sel) {
      if (b.entries() != n_steps * n_head_kv) return std::string(name) + " do not cover every step and head";
      if (b.offsets.front() != 0 || b.offsets.back() != static_cast<int64_t>(b.bits.size()) ||
          !std::is_sorted(b.offsets.begin(), b.offsets.end()))
        return std::string(name) + ": offsets are not increasing within the bitmap";
    }
  }
  if (!recall.empty() && recall.size() != static_cast<size_t>(n_steps * n_layer * n_head_kv))
    return "recall holds " + std::to_string(recall.size()) + " values, expected steps x layers x heads";
  return {};
}

TimelineCursor::TimelineCursor(const Timeline& t, int64_t layer, int64_t head)
    : t_(t), layer_(layer), head_(head), enter_(t.n_steps + 1), leave_(t.n_steps + 1) {
  check_index(t, layer, head, -1, 0);
  const size_t base = row_base(t, layer, head);
  for (int64_t p = 0; p < t.n_positions; ++p) {
    const int32_t in = t.entered_at[p], out = t.evicted_at[base + p];
    if (out == in || in < 0 || in > t.n_steps || out > t.n_steps)
      continue;  // never live, or not a valid record  // entered and dropped in the same step: never live
    enter_[in].push_back(p);
    if (out >= 0) leave_[out].push_back(p);
  }
  advance_to(0);
}

void TimelineCursor::apply(int64_t s) {
  const auto& in = enter_[s];
  const auto& out = leave_[s];
  if (!out.empty()) {  // both sorted: one merge pass
    std::vector<int64_t> kept;
    kept.reserve(live_.size());
    std::set_difference(live_.begin(), live_.end(), out.begin(), out.end(), std::back_inserter(kept));
    live_.swap(kept);
  }
  // Positions are handed out in increasing order, so a step's new positions follow every live one.
  live_.insert(live_.end(), in.begin(), in.end());
  if (!in.empty() && live_.size() > in.size() && live_[live_.size() - in.size() - 1] > in.front())
    std::sort(live_.begin(), live_.end());
}

void TimelineCursor::advance_to(int64_t step) {
  if (step > t_.n_steps) throw std::out_of_range("TimelineCursor: step past the record");
  while (step_ < step) apply(++step_);
}

}  // namespace kvscope
