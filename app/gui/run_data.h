#pragma once
// RunData: one stored run decoded for the views (arrays as floats, kept sets sorted, token texts),
// loaded once from a SessionStore and shared read-only between views. Blob conventions follow what
// kvscope-cli writes (docs/sessions.md): per layer "kept_positions" (head h, i64 [n_kept] true prompt
// positions), "head_summary" (head -1, f32 [n_head_kv, 7], columns = capture.h
// summary_metric_names()), full capture "attention" and "cos_to_mean" (f16/f32 [n_head_kv, n_tok]),
// "channel_mean" and "channel_cv" (f32 [n_head_kv, head_dim]); step metrics "kl", "top1",
// "bytes_read", "selection_recall"; run blob "topk_unique" (i64 [n_layer, n_head]).
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvscope/sessions/session_store.h"

namespace kvscope {
class Tokenizer;
}

namespace kvscope::gui {

/// Per-head summary metric names, in the column order of the "head_summary" blob
/// (= core capture.h summary_metric_names(); a test checks they agree).
const std::vector<std::string>& head_summary_names();
/// A short human label of a summary metric ("entropy (nats)", ...); the name itself if unknown.
std::string metric_label(const std::string& name);

/// A run of an open database: database path + run id.
struct RunRef {
  std::string db;
  std::int64_t run = -1;
  friend bool operator==(const RunRef&, const RunRef&) = default;
  friend auto operator<=>(const RunRef&, const RunRef&) = default;
};

/// One run, decoded. Immutable after load_run_data().
struct RunData {
  RunRef ref;
  sessions::RunRecord record;
  std::int64_t n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  std::int64_t n_tok = 0;  ///< prompt tokens

  std::vector<std::string> token_text;  ///< display text per prompt token ("#id" without a tokenizer)
  bool tokens_from_tokenizer = false;
  std::string tokenizer_note;  ///< why ids are shown (tokenizer not found, ...)

  /// kept[layer][kv_head]: sorted true prompt positions kept after prefill (empty vectors when the
  /// run stored no kept sets: full cache).
  std::vector<std::vector<std::vector<std::int64_t>>> kept;
  bool has_kept = false;
  /// Per position: how many (layer, kv head) pairs kept it.
  std::vector<std::uint32_t> keep_count;

  std::vector<std::string> summary_names;  ///< head_summary columns
  std::vector<float> summary;              ///< [n_layer, n_head_kv, n_summary]; NaN = not captured
  bool has_summary = false;

  /// Full capture, per layer (empty vector = not captured for that layer).
  std::vector<std::vector<float>> attention;     ///< [n_head_kv * n_tok] window-mean attention
  std::vector<std::vector<float>> cos_to_mean;   ///< [n_head_kv * n_tok]
  std::vector<std::vector<float>> channel_mean;  ///< [n_head_kv * head_dim]
  std::vector<std::vector<float>> channel_cv;    ///< [n_head_kv * head_dim]
  std::vector<std::vector<float>> keys_pca;      ///< [n_head_kv * n_tok * 2] keys on their two principal axes
  bool has_attention = false, has_cos = false, has_channels = false, has_pca = false;
  /// "topk_unique": distinct positions Exact-TopK picked over all decode steps, [topk_rows (layers),
  /// topk_cols (query heads)]; empty when not recorded.
  std::vector<float> topk_unique;
  std::int64_t topk_rows = 0, topk_cols = 0;

  /// Step metrics by name ("kl", "top1", "bytes_read", ...): value per step (NaN for gaps).
  std::map<std::string, std::vector<double>> steps;
  /// Other stored blobs (not decoded above): name, layer, head, shape.
  std::vector<sessions::BlobInfo> other_blobs;
  double load_ms = 0;

  // ---- accessors -----------------------------------------------------------------------------
  /// Summary metric m of (layer, kv head), NaN when absent.
  float metric(std::int64_t layer, std::int64_t head, std::size_t m) const;
  /// Index of summary metric `name`, or nullopt.
  std::optional<std::size_t> metric_index(const std::string& name) const;
  /// True when (layer, head) kept prompt position `pos`.
  bool kept_at(std::int64_t layer, std::int64_t head, std::int64_t pos) const;
  /// Entries kept by (layer, head); n_tok for a run without kept sets (full cache).
  std::int64_t kept_count(std::int64_t layer, std::int64_t head) const;
  /// Attention of (layer, head) over prompt positions, or nullptr when not captured.
  const float* attention_row(std::int64_t layer, std::int64_t head) const;
  const float* cos_row(std::int64_t layer, std::int64_t head) const;
  /// Summary metric value, NaN when absent.
  double summary_metric(const std::string& name) const;
  /// One line: "#id name · pipeline · budget".
  std::string title() const;
  /// Figure caption: pipeline, model, budget, prompt length, database.
  std::string caption() const;
  /// "fraction 0.25" / "ratio 0.75" / "stored 512" ...
  std::string budget_text() const;
  /// Short model name (last path component).
  std::string model_name() const;
};

/// Loads tokenizers by model path once (a model's tokenizer serves all its runs).
class TokenizerCache {
 public:
  TokenizerCache();
  ~TokenizerCache();
  TokenizerCache(const TokenizerCache&) = delete;
  TokenizerCache& operator=(const TokenizerCache&) = delete;
  /// The tokenizer of `model_path` (a HF directory, a llama2.c .bin or its directory, a tokenizer
  /// file), or null with `why` set when it does not load.
  const Tokenizer* get(const std::string& model_path, std::string* why);

 private:
  struct Entry;
  std::map<std::string, std::unique_ptr<Entry>> entries_;
};

/// Reads run `run` of `store` and decodes it. Token texts come from the model's tokenizer when
/// `tokenizers` is given and the model path loads, else "#id". Throws sessions::SessionError.
std::shared_ptr<const RunData> load_run_data(const sessions::SessionStore& store, std::int64_t run,
                                             TokenizerCache* tokenizers);

/// Display text of a token for the token views: control characters escaped ("\n" as U+21B5,
/// "\t" as U+2192), empty as U+2205.
std::string display_token(const std::string& text);

}  // namespace kvscope::gui
