#include "kvscope/core/head_pattern.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "json_file.h"
#include "json_integers.h"
#include "kvscope/core/duo_pattern.h"
#include "kvscope/core/errors.h"

namespace kvscope {

int64_t HeadPattern::kept_entries(int64_t n_tok) const {
  int64_t total = 0;
  for (const auto& layer : layers)
    for (const auto& h : layer) total += h.streaming ? std::min(n_tok, h.sink + h.window) : n_tok;
  return total;
}

namespace {

/// Largest sink or window a pattern may name: far beyond any context, and small enough that
/// sink + window and their sums over every head cannot overflow int64.
constexpr int64_t kMaxHeadSpan = int64_t(1) << 40;

HeadPattern head_pattern_from_json(const nlohmann::json& j, const std::filesystem::path& path) {
  if (!j.is_object() || j.value("format", "") != "kvscope.head_pattern.v1")
    throw InputError(path, "not a kvscope head pattern (expected \"format\": \"kvscope.head_pattern.v1\")");
  HeadPattern p;
  p.method = j.value("method", "manual");
  p.budget = j.value("budget", 0.0);
  if (!j.contains("layers") || !j["layers"].is_array()) throw InputError(path, "missing \"layers\" array");
  for (size_t l = 0; l < j["layers"].size(); ++l) {
    const auto& layer = j["layers"][l];
    if (!layer.contains("heads") || !layer["heads"].is_array())
      throw InputError(path, "layer " + std::to_string(l) + ": missing \"heads\" array");
    std::vector<HeadPlan> heads;
    for (size_t h = 0; h < layer["heads"].size(); ++h) {
      const auto& e = layer["heads"][h];
      HeadPlan plan;
      plan.streaming = e.value("streaming", false);
      for (auto [key, field] : {std::pair{"sink", &plan.sink}, std::pair{"window", &plan.window}}) {
        if (!e.is_object() || !e.contains(key)) continue;
        const auto v = json_integer(e[key], INT64_MIN, INT64_MAX);
        if (!v)
          throw InputError(
              path, "layer " + std::to_string(l) + " head " + std::to_string(h) + ": '" + key + "' must be an integer");
        if (*v > kMaxHeadSpan)
          throw InputError(path, "layer " + std::to_string(l) + " head " + std::to_string(h) + ": '" + key +
                                     "' = " + std::to_string(*v) + " is beyond 2^40 tokens");
        *field = *v;
      }
      if (plan.streaming && (plan.sink < 0 || plan.window < 1))
        throw InputError(path, "layer " + std::to_string(l) + " head " + std::to_string(h) +
                                   ": a streaming head needs sink >= 0 and window >= 1");
      heads.push_back(plan);
    }
    p.layers.push_back(std::move(heads));
  }
  return p;
}

}  // namespace

HeadPattern parse_head_pattern(const nlohmann::json& j, const std::filesystem::path& path) {
  try {
    return head_pattern_from_json(j, path);
  } catch (const nlohmann::json::exception& e) {  // a field of the wrong type
    throw InputError(path, std::string("malformed head pattern: ") + e.what());
  }
}

HeadPattern load_head_pattern(const std::filesystem::path& path) {
  if (is_duo_pattern_path(path))
    throw InputError(
        path,
        "is a DuoAttention pattern (a directory or .tsv of gates), not a kvscope JSON pattern: which heads "
        "stream depends on a sparsity, threshold or budget rule (resolve_heads_stage, load_duo_pattern: "
        "duo_pattern.h)");
  return parse_head_pattern(read_json_file(path), path);
}

HeadPattern load_head_pattern(const std::filesystem::path& path, const ModelConfig& c) {
  HeadPattern p = load_head_pattern(path);
  if (static_cast<int64_t>(p.layers.size()) != c.n_layer)
    throw InputError(path,
                     "has " + std::to_string(p.layers.size()) + " layers, the model " + std::to_string(c.n_layer));
  for (size_t l = 0; l < p.layers.size(); ++l)
    if (static_cast<int64_t>(p.layers[l].size()) != c.n_head_kv)
      throw InputError(path, "layer " + std::to_string(l) + " has " + std::to_string(p.layers[l].size()) +
                                 " heads, the model " + std::to_string(c.n_head_kv) + " KV heads");
  return p;
}

void save_head_pattern(const std::filesystem::path& path, const HeadPattern& p) {
  nlohmann::json j = {{"format", "kvscope.head_pattern.v1"},
                      {"method", p.method},
                      {"budget", p.budget},
                      {"n_layer", p.layers.size()},
                      {"n_head_kv", p.layers.empty() ? 0 : p.layers[0].size()}};
  j["layers"] = nlohmann::json::array();
  for (const auto& layer : p.layers) {
    nlohmann::json heads = nlohmann::json::array();
    for (const auto& h : layer)
      heads.push_back(h.streaming ? nlohmann::json{{"streaming", true}, {"sink", h.sink}, {"window", h.window}}
                                  : nlohmann::json{{"streaming", false}});
    j["layers"].push_back({{"heads", heads}});
  }
  std::ofstream out(path);
  if (!out) throw InputError(path, "cannot be written");
  out << j.dump(1) << "\n";
  if (!out) throw InputError(path, "write failed");
}

}  // namespace kvscope
