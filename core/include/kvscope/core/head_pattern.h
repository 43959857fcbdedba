#pragma once
// Head patterns: which KV heads stay dense and which stream (sink tokens + a recent window), as
// learned offline by DuoAttention (Xiao et al. 2024) or HS-SFT (docs/methods.md §5) and run at inference.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kvscope/core/model_config.h"

namespace kvscope {

/// One KV head's retention. Dense heads keep everything; streaming heads keep `sink` first tokens
/// plus the `window` most recent ones (a ring buffer during decode).
struct HeadPlan {
  bool streaming = false;
  int64_t sink = 0;
  int64_t window = 0;
};

/// A pattern for a whole model. File format (JSON, documented in docs/head-patterns.md):
///   {"format": "kvscope.head_pattern.v1", "method": "duo|hs-sft|manual", "budget": 0.25,
///    "n_layer": L, "n_head_kv": H,
///    "layers": [ {"heads": [ {"streaming": false} | {"streaming": true, "sink": 128, "window": 512}, ...]}, ...]}
struct HeadPattern {
  std::string method = "manual";
  double budget = 0;                          ///< target fraction of the full cache (informational)
  std::vector<std::vector<HeadPlan>> layers;  ///< [n_layer][n_head_kv]

  /// Entries kept per KV head for a prompt of n_tok tokens, summed over the model.
  int64_t kept_entries(int64_t n_tok) const;
};

/// Reads and validates a pattern file against `config` (layer and KV-head counts, sink >= 0,
/// window >= 1 for streaming heads). Throws InputError(path, ...) naming what is wrong.
HeadPattern load_head_pattern(const std::filesystem::path& path, const ModelConfig& config);
/// Same, without a model to check against (shape taken from the file).
HeadPattern load_head_pattern(const std::filesystem::path& path);
/// The pattern in parsed JSON `j` read from `path` (named in errors): the checks of
/// load_head_pattern without a model, plus sink and window <= 2^40. Throws InputError.
HeadPattern parse_head_pattern(const nlohmann::json& j, const std::filesystem::path& path);
/// Writes `pattern` as JSON. Throws InputError(path, ...) if it cannot be written.
void save_head_pattern(const std::filesystem::path& path, const HeadPattern& pattern);

}  // namespace kvscope
