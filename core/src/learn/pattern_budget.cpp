#include "kvscope/core/learn/pattern_budget.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "kvscope/core/errors.h"

namespace kvscope::learn {
namespace {

std::string fmt(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

/// (layer, head) pairs ordered by gate, largest first; ties keep (layer, head) order.
std::vector<std::pair<size_t, size_t>> by_gate(const std::vector<std::vector<double>>& gates) {
  std::vector<std::pair<size_t, size_t>> order;
  for (size_t l = 0; l < gates.size(); ++l)
    for (size_t h = 0; h < gates[l].size(); ++h) order.emplace_back(l, h);
  std::stable_sort(order.begin(), order.end(),
                   [&](const auto& a, const auto& b) { return gates[a.first][a.second] > gates[b.first][b.second]; });
  return order;
}

}  // namespace

double kept_fraction(const HeadPattern& p, int64_t n) {
  if (n < 1) throw InputError("reference length must be >= 1 token, got " + std::to_string(n));
  int64_t heads = 0;
  for (const auto& layer : p.layers) heads += static_cast<int64_t>(layer.size());
  if (heads == 0) throw InputError("head pattern has no heads");
  return static_cast<double>(p.kept_entries(n)) / (static_cast<double>(heads) * static_cast<double>(n));
}

HeadPattern threshold_gates(const std::vector<std::vector<double>>& gates, double budget, int64_t n, int64_t sink,
                            int64_t window) {
  HeadPattern p;
  p.method = "duo";
  p.budget = budget;
  for (const auto& layer : gates) p.layers.emplace_back(layer.size(), HeadPlan{true, sink, window});
  const double floor_fraction = kept_fraction(p, n);
  if (floor_fraction > budget)
    throw InputError("--budget " + fmt(budget) + " is below what streaming heads alone keep: sink " +
                     std::to_string(sink) + " + window " + std::to_string(window) + " of a " + std::to_string(n) +
                     "-token reference context is " + fmt(floor_fraction) +
                     " of the cache (lower --sink/--window or raise --reference-length)");
  for (const auto& [l, h] : by_gate(gates)) {
    HeadPattern trial = p;
    trial.layers[l][h] = HeadPlan{};
    if (kept_fraction(trial, n) > budget) break;
    p = std::move(trial);
  }
  return p;
}

std::vector<std::vector<bool>> choose_dense_heads(const std::vector<std::vector<double>>& gates, double alpha) {
  std::vector<std::vector<bool>> dense;
  int64_t total = 0;
  for (const auto& layer : gates) {
    dense.emplace_back(layer.size(), false);
    total += static_cast<int64_t>(layer.size());
  }
  if (alpha <= 0 || gates.empty()) return dense;
  const int64_t per_layer = static_cast<int64_t>(std::floor(alpha * static_cast<double>(gates[0].size()) + 1e-9));
  int64_t chosen = 0;
  for (size_t l = 0; l < gates.size(); ++l) {
    std::vector<std::vector<double>> one{gates[l]};
    int64_t k = 0;
    for (const auto& [unused, h] : by_gate(one)) {
      if (k++ >= per_layer) break;
      dense[l][h] = true;
      ++chosen;
    }
  }
  const int64_t want = std::min<int64_t>(total, std::llround(alpha * static_cast<double>(total)));
  for (const auto& [l, h] : by_gate(gates)) {
    if (chosen >= want) break;
    if (dense[l][h]) continue;
    dense[l][h] = true;
    ++chosen;
  }
  return dense;
}

HeadPattern rescale_windows(const std::vector<std::vector<bool>>& dense, const std::vector<int64_t>& learned,
                            int64_t sink, double budget, int64_t n) {
  if (learned.size() != dense.size())
    throw InputError("rescale_windows: " + std::to_string(learned.size()) + " learned windows for " +
                     std::to_string(dense.size()) + " layers");
  auto pattern_at = [&](double s) {
    HeadPattern p;
    p.method = "hs-sft";
    p.budget = budget;
    for (size_t l = 0; l < dense.size(); ++l) {
      const int64_t w = std::max<int64_t>(1, static_cast<int64_t>(std::floor(s * static_cast<double>(learned[l]))));
      std::vector<HeadPlan> heads;
      for (bool d : dense[l]) heads.push_back(d ? HeadPlan{} : HeadPlan{true, sink, w});
      p.layers.push_back(std::move(heads));
    }
    return p;
  };
  HeadPattern lo_p = pattern_at(0);
  const double least = kept_fraction(lo_p, n);
  if (least > budget)
    throw InputError("--budget " + fmt(budget) + " is below what the dense heads and the " + std::to_string(sink) +
                     " sink tokens of the streaming heads keep on a " + std::to_string(n) +
                     "-token reference context (" + fmt(least) +
                     "); lower --dense-fraction or --sink, or raise --reference-length");
  const int64_t smallest = std::max<int64_t>(1, *std::min_element(learned.begin(), learned.end()));
  double lo = 0, hi = static_cast<double>(n) / static_cast<double>(smallest) + 1;  // at hi every head keeps all
  if (kept_fraction(pattern_at(hi), n) <= budget) return pattern_at(hi);
  for (int it = 0; it < 64; ++it) {
    const double mid = 0.5 * (lo + hi);
    (kept_fraction(pattern_at(mid), n) <= budget ? lo : hi) = mid;
  }
  return pattern_at(lo);
}

}  // namespace kvscope::learn
