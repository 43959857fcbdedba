#include "kvscope/core/duo_pattern.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <string_view>
#include <system_error>

#include <nlohmann/json.hpp>

#include "json_file.h"
#include "json_integers.h"
#include "kvscope/core/errors.h"
#include "text_file.h"

namespace kvscope {
namespace fs = std::filesystem;

namespace {

/// Largest sink or window a pattern may name (as head_pattern.cpp's kMaxHeadSpan).
constexpr int64_t kMaxSpan = int64_t(1) << 40;
/// Gates this far outside [0, 1] are clipped (load_attn_pattern's np.clip); farther ones are errors.
constexpr double kClipTolerance = 0.01;

std::string_view trim(std::string_view s) {
  const auto is_space = [](char c) { return c == ' ' || c == '\r' || c == '\v' || c == '\f'; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string gates_text(size_t n) { return std::to_string(n) + (n == 1 ? " gate" : " gates"); }

std::string where(int64_t line, int64_t column) {
  return "line " + std::to_string(line) + ", column " + std::to_string(column) + ": ";
}

double parse_gate(std::string_view field, int64_t line, int64_t column, const fs::path& tsv) {
  const std::string_view f = trim(field);
  if (f.empty()) throw InputError(tsv, where(line, column) + "empty value (gates are separated by one tab)");
  std::string_view digits = f;
  if (digits.front() == '+') digits.remove_prefix(1);  // Python's float() accepts "+0.5"
  double v = 0;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (r.ec == std::errc::result_out_of_range ||
      (r.ec == std::errc() && r.ptr == digits.data() + digits.size() && !std::isfinite(v)))
    throw InputError(tsv, where(line, column) + "'" + std::string(f) + "' is not a finite number");
  if (r.ec != std::errc() || r.ptr != digits.data() + digits.size()) {
    const bool spaced = f.find(' ') != std::string_view::npos;
    throw InputError(tsv, where(line, column) + "'" + std::string(f) + "' is not a number" +
                              (spaced ? " (gates are separated by tabs, not spaces)" : ""));
  }
  if (v < -kClipTolerance || v > 1 + kClipTolerance)
    throw InputError(tsv, where(line, column) + "gate " + std::string(f) +
                              " is outside [0, 1] (DuoAttention gates; values within 0.01 of it are clipped)");
  return std::clamp(v, 0.0, 1.0);
}

/// config.json's `key` ("sink_size" / "recent_size"): absent or null keeps `fallback`.
int64_t config_size(const nlohmann::json& j, const char* key, int64_t lo, int64_t fallback, const fs::path& path) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const auto v = json_integer(j[key], lo, kMaxSpan);
  if (!v)
    throw InputError(path, std::string("\"") + key + "\" must be an integer in [" + std::to_string(lo) +
                               ", 2^40] (got " + j[key].dump() + ")");
  return *v;
}

void check_span(const char* what, int64_t v, int64_t lo) {
  if (v < lo || v > kMaxSpan)
    throw InputError(std::string("DuoAttention pattern: ") + what + " = " + std::to_string(v) + " is outside [" +
                     std::to_string(lo) + ", 2^40]");
}

}  // namespace

int64_t DuoGates::n_heads() const {
  int64_t n = 0;
  for (const auto& row : gates) n += static_cast<int64_t>(row.size());
  return n;
}

bool is_duo_pattern_path(const fs::path& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) || path.extension() == ".tsv";
}

DuoGates parse_duo_gates(const std::string& text, const fs::path& tsv) {
  DuoGates g;
  g.tsv = tsv;
  int64_t line = 0;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string_view row(text.data() + begin, end - begin);
    begin = end + 1;
    ++line;
    if (const size_t hash = row.find('#'); hash != std::string_view::npos) row = row.substr(0, hash);  // np.loadtxt
    if (trim(row).find_first_not_of('\t') == std::string_view::npos) continue;  // blank: skipped as np.loadtxt does
    std::vector<double> values;
    size_t start = 0;
    for (int64_t column = 1;; ++column) {
      const size_t tab = row.find('\t', start);
      values.push_back(
          parse_gate(row.substr(start, tab == std::string_view::npos ? row.npos : tab - start), line, column, tsv));
      if (tab == std::string_view::npos) break;
      start = tab + 1;
    }
    if (!g.gates.empty() && values.size() != g.gates.front().size())
      throw InputError(tsv, "line " + std::to_string(line) + ": " + gates_text(values.size()) + ", line " +
                                std::to_string(g.lines.front()) + " has " + std::to_string(g.gates.front().size()) +
                                " (one row per layer, one gate per KV head)");
    g.gates.push_back(std::move(values));
    g.lines.push_back(line);
  }
  if (g.gates.empty())
    throw InputError(tsv,
                     "no gates (a DuoAttention pattern has one row per layer of tab-separated gates, one per KV head)");
  return g;
}

DuoGates read_duo_gates(const fs::path& path) {
  std::error_code ec;
  const bool dir = fs::is_directory(path, ec);
  const fs::path tsv = dir ? path / kDuoGateFile : path;
  if (dir && !fs::exists(tsv, ec))
    throw InputError(path, std::string("no ") + kDuoGateFile +
                               " (a DuoAttention pattern directory holds full_attention_heads.tsv and config.json)");
  DuoGates g = parse_duo_gates(read_text_file(tsv), tsv);
  const fs::path config = tsv.parent_path() / "config.json";
  if (fs::exists(config, ec)) {
    const nlohmann::json j = read_json_file(config);
    if (!j.is_object()) throw InputError(config, "not a JSON object (DuoAttention's config.json)");
    g.config = config;
    g.sink_size = config_size(j, "sink_size", 0, kDuoDefaultSink, config);
    g.recent_size = config_size(j, "recent_size", 1, kDuoDefaultRecent, config);
  }
  return g;
}

void check_duo_gates(const DuoGates& g, const ModelConfig& c) {
  const auto n_rows = static_cast<int64_t>(g.gates.size());
  if (n_rows > c.n_layer)
    throw InputError(g.tsv, "line " + std::to_string(g.lines[c.n_layer]) + ": row " + std::to_string(c.n_layer + 1) +
                                ", but the model has " + std::to_string(c.n_layer) + " layers (one row per layer)");
  if (n_rows < c.n_layer)
    throw InputError(g.tsv, "line " + std::to_string(g.lines.back()) + ": the last row is layer " +
                                std::to_string(n_rows - 1) + ", but the model has " + std::to_string(c.n_layer) +
                                " layers (one row per layer)");
  const auto n_cols = static_cast<int64_t>(g.gates.front().size());
  if (n_cols != c.n_head_kv) {
    std::string hint;
    if (n_cols == c.n_head && c.n_head != c.n_head_kv)
      hint = "; one per query head? DuoAttention gates are per KV head";
    throw InputError(g.tsv, "line " + std::to_string(g.lines.front()) + ": " + gates_text(n_cols) +
                                ", but the model has " + std::to_string(c.n_head_kv) + " KV heads" + hint);
  }
}

int64_t duo_streaming_count(int64_t n_heads, double sparsity) {
  if (n_heads <= 0 || !(sparsity > 0)) return 0;
  if (sparsity >= 1) return n_heads;
  // np.quantile's linear method: index sparsity x (n - 1). Gates below the threshold stream, so an
  // integer index k streams k heads and a fractional one floor + 1. The tolerance absorbs products
  // such as 0.7 x 10 = 7.000000000000001, where numpy's interpolated threshold rounds to gate k too.
  const double index = sparsity * static_cast<double>(n_heads - 1);
  return std::min<int64_t>(n_heads, static_cast<int64_t>(std::ceil(index - 1e-9)));
}

std::vector<std::vector<bool>> duo_retrieval_lowest(const std::vector<std::vector<double>>& gates,
                                                    int64_t n_streaming) {
  std::vector<std::pair<size_t, size_t>> order;
  for (size_t l = 0; l < gates.size(); ++l)
    for (size_t h = 0; h < gates[l].size(); ++h) order.emplace_back(l, h);
  std::stable_sort(order.begin(), order.end(),
                   [&](const auto& a, const auto& b) { return gates[a.first][a.second] < gates[b.first][b.second]; });
  std::vector<std::vector<bool>> retrieval;
  for (const auto& row : gates) retrieval.emplace_back(row.size(), true);
  const auto k = std::clamp<int64_t>(n_streaming, 0, static_cast<int64_t>(order.size()));
  for (int64_t i = 0; i < k; ++i) retrieval[order[i].first][order[i].second] = false;
  return retrieval;
}

std::vector<std::vector<bool>> duo_retrieval_threshold(const std::vector<std::vector<double>>& gates,
                                                       double threshold) {
  std::vector<std::vector<bool>> retrieval;
  for (const auto& row : gates) {
    retrieval.emplace_back(row.size());
    for (size_t h = 0; h < row.size(); ++h) retrieval.back()[h] = row[h] >= threshold;
  }
  return retrieval;
}

RocketKvDuoPlan rocketkv_duo_rule(int64_t tokens, int64_t length, int64_t n_heads) {
  if (tokens < 1)
    throw InputError(
        "RocketKV's DuoAttention rule (budget_rule=rocketkv) needs a token budget tokens >= 1 per KV head (got " +
        std::to_string(tokens) + ")");
  RocketKvDuoPlan p;
  constexpr int64_t kStreamed = kRocketKvDuoSink + kRocketKvDuoRecent;  // 640
  if (tokens <= kStreamed) {
    // "If the token budget is lower than 640, all attention heads become streaming heads ... initial
    // tokens 128 if the token budget is larger than 256, otherwise 20% of the token budget. The rest
    // of the token budget is assigned to recent tokens." (At exactly 640 both branches agree.)
    p.sink = tokens > 256 ? kRocketKvDuoSink : tokens / 5;
    p.recent = tokens - p.sink;
    return p;
  }
  if (length < 1)
    throw InputError("RocketKV's DuoAttention rule (budget_rule=rocketkv) with tokens = " + std::to_string(tokens) +
                     " > 640 needs length = the sequence length L the retrieval share is set for (RocketKV App. A.3: "
                     "the share of retrieval heads matches the budget on average, n_r x L + (n - n_r) x 640 <= n x t)");
  p.sink = kRocketKvDuoSink;
  p.recent = kRocketKvDuoRecent;
  if (length <= tokens) {
    p.retrieval_share = 1;
    p.n_retrieval = n_heads;
    return p;
  }
  p.retrieval_share = static_cast<double>(tokens - kStreamed) / static_cast<double>(length - kStreamed);
  // floor in integers: n_r x (L - 640) <= n x (t - 640). __int128 keeps the products of 2^40-sized
  // lengths and head counts exact.
  p.n_retrieval = static_cast<int64_t>((static_cast<__int128>(n_heads) * (tokens - kStreamed)) / (length - kStreamed));
  return p;
}

HeadPattern duo_head_pattern(const DuoGates& g, const DuoPatternOptions& o) {
  std::vector<std::vector<bool>> retrieval;
  int64_t sink = o.sink >= 0 ? o.sink : g.sink_size;
  int64_t recent = o.recent >= 0 ? o.recent : g.recent_size;
  switch (o.rule) {
    case DuoPatternOptions::Rule::kSparsity:
      retrieval = duo_retrieval_lowest(g.gates, duo_streaming_count(g.n_heads(), o.sparsity));
      break;
    case DuoPatternOptions::Rule::kThreshold:
      retrieval = duo_retrieval_threshold(g.gates, o.threshold);
      break;
    case DuoPatternOptions::Rule::kRocketKv: {
      const RocketKvDuoPlan p = rocketkv_duo_rule(o.tokens, o.length, g.n_heads());
      retrieval = duo_retrieval_lowest(g.gates, g.n_heads() - p.n_retrieval);
      sink = p.sink;
      recent = p.recent;
      break;
    }
  }
  check_span("sink", sink, 0);
  check_span("recent", recent, 1);
  HeadPattern pattern;
  pattern.method = "duo";
  for (const auto& row : retrieval) {
    std::vector<HeadPlan> heads;
    for (const bool dense : row) heads.push_back(dense ? HeadPlan{} : HeadPlan{true, sink, recent});
    pattern.layers.push_back(std::move(heads));
  }
  return pattern;
}

HeadPattern load_duo_pattern(const fs::path& path, const DuoPatternOptions& options) {
  return duo_head_pattern(read_duo_gates(path), options);
}

HeadPattern load_duo_pattern(const fs::path& path, const DuoPatternOptions& options, const ModelConfig& config) {
  const DuoGates g = read_duo_gates(path);
  check_duo_gates(g, config);
  return duo_head_pattern(g, options);
}

namespace {

const char* duo_default(std::string_view key) {
  for (const auto& d : kHeadsStageDuoDefaults)
    if (key == d.key) return d.value;
  throw std::logic_error("heads: no parameter " + std::string(key));
}

}  // namespace

HeadsStagePattern resolve_heads_stage(const ParamValues& v) {
  HeadsStagePattern out;
  out.params = v;
  const std::string& path = v.at("pattern");
  if (path.empty())
    throw InputError(
        "heads: parameter 'pattern' (a head-pattern JSON file or a DuoAttention pattern directory / .tsv) is "
        "required");
  out.file = path;
  // Numbers compare by value ("threshold=0.0" is the default too); resolve_params checked them.
  const auto given = [&](const char* key) {
    if (std::string_view(key) == "budget_rule") return v.at(key) != duo_default(key);
    return std::stod(v.at(key)) != std::stod(duo_default(key));
  };
  if (!is_duo_pattern_path(path)) {
    for (const auto& d : kHeadsStageDuoDefaults)
      if (given(d.key))
        throw InputError("heads: parameter '" + std::string(d.key) +
                         "' applies to DuoAttention patterns (a directory holding full_attention_heads.tsv, or a "
                         ".tsv file); '" +
                         path + "' is a kvscope JSON pattern");
    out.pattern = load_head_pattern(path);
    return out;
  }
  const bool rocket = v.at("budget_rule") == "rocketkv";
  DuoPatternOptions o;
  if (rocket) {
    for (const char* key : {"sparsity", "threshold", "sink", "recent"})
      if (given(key))
        throw InputError(
            "heads: budget_rule=rocketkv sets the sinks (128), the recent window (512) and the share of retrieval "
            "heads itself; drop parameter '" +
            std::string(key) + "'");
    o.rule = DuoPatternOptions::Rule::kRocketKv;
    o.tokens = param_int(v, "tokens");
    o.length = param_int(v, "length");
  } else {
    for (const char* key : {"tokens", "length"})
      if (given(key)) throw InputError("heads: parameter '" + std::string(key) + "' belongs to budget_rule=rocketkv");
    if (given("threshold") && given("sparsity"))
      throw InputError("heads: give sparsity or threshold, not both (a DuoAttention pattern is binarized by one)");
    if (given("threshold")) {
      o.rule = DuoPatternOptions::Rule::kThreshold;
      o.threshold = param_float(v, "threshold");
    } else {
      o.sparsity = param_float(v, "sparsity");
    }
    o.sink = param_int(v, "sink");
    o.recent = param_int(v, "recent");
    if (o.recent == 0)
      throw InputError("heads: parameter 'recent' must be >= 1, or -1 for the pattern's config.json recent_size");
  }
  const DuoGates gates = read_duo_gates(path);
  out.pattern = duo_head_pattern(gates, o);
  out.file = gates.tsv.string();
  if (!rocket) {  // the sizes run, config.json's included, so the canonical SPEC says them
    out.params["sink"] = std::to_string(o.sink >= 0 ? o.sink : gates.sink_size);
    out.params["recent"] = std::to_string(o.recent >= 0 ? o.recent : gates.recent_size);
  }
  return out;
}

}  // namespace kvscope
