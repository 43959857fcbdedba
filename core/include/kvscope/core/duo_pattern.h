#pragma once
// DuoAttention's published head patterns (Xiao et al. 2024; github.com/mit-han-lab/duo-attention,
// attn_patterns/<model>/<run>/): one gate in [0, 1] per layer and KV head, binarized into retrieval
// (dense) and streaming heads (sink + recent window) as the repository's duo_attn/utils.py does, and
// RocketKV's rule for DuoAttention at a token budget t (RocketKV, Behnam et al. 2025, App. A.3).
// Reference: docs/head-patterns.md "DuoAttention patterns".
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kvscope/core/head_pattern.h"
#include "kvscope/core/model_config.h"
#include "kvscope/core/param_spec.h"

namespace kvscope {

/// Sizes DuoAttention uses without a config.json (duo_attn/utils.py parse_args: --sink_size 64,
/// --recent_size 256). The published patterns' config.json files name their own (128 and 256).
inline constexpr int64_t kDuoDefaultSink = 64;
inline constexpr int64_t kDuoDefaultRecent = 256;
/// The gate file of a pattern directory.
inline constexpr const char* kDuoGateFile = "full_attention_heads.tsv";

/// A DuoAttention gate file as read, before binarization.
struct DuoGates {
  std::filesystem::path tsv;                ///< the gate file read
  std::filesystem::path config;             ///< the config.json beside it, or empty when there is none
  std::vector<std::vector<double>> gates;   ///< [n_layer][n_head_kv], clipped into [0, 1]
  std::vector<int64_t> lines;               ///< 1-based line of each layer's row in `tsv`
  int64_t sink_size = kDuoDefaultSink;      ///< config.json "sink_size", else kDuoDefaultSink
  int64_t recent_size = kDuoDefaultRecent;  ///< config.json "recent_size", else kDuoDefaultRecent
  int64_t n_heads() const;                  ///< gates over all layers
};

/// Whether `path` names a DuoAttention pattern: a directory, or a file ending in ".tsv" (anything
/// else is a kvscope JSON pattern).
bool is_duo_pattern_path(const std::filesystem::path& path);

/// Reads a DuoAttention pattern: `path` is a directory holding full_attention_heads.tsv (and,
/// optionally, config.json), or a .tsv gate file (config.json then read from its directory when
/// present). The gate file, as np.savetxt writes it and np.loadtxt(delimiter="\t") reads it: one row
/// per layer, one tab-separated number per KV head, no header; blank lines and '#' comments are
/// skipped. Gates slightly outside [0, 1] (within 0.01: the published files hold values such as
/// -1.4e-3) are clipped as load_attn_pattern does; anything else throws. Throws InputError(file,
/// "line N[, column C]: ...") for a non-number, a non-finite or out-of-range gate, rows of unequal
/// length or no rows, and InputError(config.json, ...) for sink_size < 0, recent_size < 1 or a
/// non-integer size.
DuoGates read_duo_gates(const std::filesystem::path& path);
/// The gates of `text`, the contents of `tsv` (named in errors); sizes left at the defaults.
DuoGates parse_duo_gates(const std::string& text, const std::filesystem::path& tsv);
/// Throws InputError(tsv, "line N: ...") unless there is one row per model layer and one gate per
/// KV head.
void check_duo_gates(const DuoGates& gates, const ModelConfig& config);

/// How many of n_heads gates stream at `sparsity` in DuoAttention's sparsify_attention_heads:
/// the threshold is np.quantile(gates, sparsity) (linear interpolation at index sparsity x (n - 1))
/// and heads with gate >= threshold stay retrieval, so with distinct gates ceil(sparsity x (n - 1))
/// heads stream (sparsity <= 0: none, >= 1: all).
int64_t duo_streaming_count(int64_t n_heads, double sparsity);
/// [layer][head] true = retrieval: all heads but the `n_streaming` with the lowest gates. Equal gates
/// stream in layer-then-head order (DuoAttention breaks ties with random noise below 1e-6).
std::vector<std::vector<bool>> duo_retrieval_lowest(const std::vector<std::vector<double>>& gates, int64_t n_streaming);
/// [layer][head] true = retrieval: gate >= threshold.
std::vector<std::vector<bool>> duo_retrieval_threshold(const std::vector<std::vector<double>>& gates, double threshold);

/// RocketKV's DuoAttention setting at a token budget of `tokens` per KV head (RocketKV App. A.3,
/// "Baselines: DuoAttention"): above 640, streaming heads keep 128 initial + 512 recent tokens and
/// the share of retrieval heads is set so that the average entries per head meet the budget; at or
/// below 640, every head streams, with 128 sink tokens if the budget exceeds 256 and 20% of it
/// (rounded down) otherwise, the rest recent.
struct RocketKvDuoPlan {
  int64_t sink = 0;
  int64_t recent = 0;
  /// (tokens - 640) / (length - 640) clamped to [0, 1] (1 when length <= tokens: the whole cache
  /// fits); 0 at or below 640.
  double retrieval_share = 0;
  /// floor(retrieval_share x n_heads): the most retrieval heads whose average, n_r x length +
  /// (n_heads - n_r) x 640 over n_heads, stays within `tokens`.
  int64_t n_retrieval = 0;
};
/// The plan for `n_heads` KV heads (over all layers) on sequences of `length` tokens (the
/// retrieval heads keep all of them). Throws InputError for tokens < 1, or tokens > 640 with
/// length < 1.
RocketKvDuoPlan rocketkv_duo_rule(int64_t tokens, int64_t length, int64_t n_heads);
/// RocketKV App. A.3's sizes.
inline constexpr int64_t kRocketKvDuoSink = 128;
inline constexpr int64_t kRocketKvDuoRecent = 512;

/// How a DuoAttention pattern becomes a head pattern.
struct DuoPatternOptions {
  enum class Rule { kSparsity, kThreshold, kRocketKv };
  Rule rule = Rule::kSparsity;
  double sparsity = 0.5;   ///< kSparsity (DuoAttention's LongBench default, eval/LongBench/pred.py)
  double threshold = 0.5;  ///< kThreshold
  int64_t sink = -1;       ///< kSparsity / kThreshold: -1 = the pattern's sink_size
  int64_t recent = -1;     ///< kSparsity / kThreshold: -1 = the pattern's recent_size
  int64_t tokens = 0;      ///< kRocketKv: t per KV head
  int64_t length = 0;      ///< kRocketKv: sequence length the retrieval share is set for
};

/// The head pattern of `gates` under `options` (method "duo"): retrieval heads dense, streaming
/// heads keep sink + recent. Throws InputError for recent < 1 or sizes beyond 2^40.
HeadPattern duo_head_pattern(const DuoGates& gates, const DuoPatternOptions& options);
/// read_duo_gates + duo_head_pattern.
HeadPattern load_duo_pattern(const std::filesystem::path& path, const DuoPatternOptions& options);
/// Same, checked against `config` first (check_duo_gates).
HeadPattern load_duo_pattern(const std::filesystem::path& path, const DuoPatternOptions& options,
                             const ModelConfig& config);

/// The `heads` stage's parameters that apply to DuoAttention patterns only, with their defaults,
/// which mean "not given" (policies/heads.cpp declares them; docs/head-patterns.md).
struct HeadsStageDefault {
  const char* key;
  const char* value;
};
inline constexpr HeadsStageDefault kHeadsStageDuoDefaults[] = {
    {"sparsity", "0.5"},     {"threshold", "0"}, {"sink", "-1"}, {"recent", "-1"},
    {"budget_rule", "none"}, {"tokens", "0"},    {"length", "0"}};

/// What a `heads` stage runs.
struct HeadsStagePattern {
  HeadPattern pattern;
  std::string file;    ///< the file read: the JSON pattern, or the DuoAttention gate .tsv
  ParamValues params;  ///< the parameters given, with a DuoAttention pattern's sink and recent as run
};
/// The head pattern of a `heads` stage with resolved parameters `params` (all of the stage's keys):
/// `pattern` a kvscope JSON file (load_head_pattern; the DuoAttention keys must keep their
/// defaults), or a DuoAttention pattern (is_duo_pattern_path) binarized by `threshold` if > 0, else
/// `sparsity`, or by budget_rule=rocketkv at `tokens` and `length`. Throws InputError("heads: ...")
/// for a combination that does not apply, and the readers' errors. Also what a figure of a recorded
/// run should call with the stage's recorded parameters.
HeadsStagePattern resolve_heads_stage(const ParamValues& params);

}  // namespace kvscope
