#pragma once
// RunData: one stored run decoded for the figures (GUI views and kvscope-cli export), in two steps.
// load_run_data() reads what the first view needs and nothing heavy: the run record (shape, prompt,
// summary and step metrics, the blob listing), per-head summary metrics, kept-set sizes (from the
// blob shapes), "topk_unique" and token texts. The heavy per-layer arrays (kept positions, attention,
// cosines, key PCA, channel statistics) are decoded later, one (Part, layer) at a time, by
// load_part(): the GUI calls it on a background thread (app/gui/part_loader.h), export inline.
// Decoded parts live in write-once slots: any thread sees a part either absent (nullptr) or complete.
//
// Blob conventions (what kvscope-cli writes, docs/sessions.md): per layer "kept_positions" (head h,
// i64 [n_kept] true prompt positions), "head_summary" (head -1, f32 [n_head_kv, 7], columns =
// capture.h summary_metric_names()), full capture "attention", "cos_to_mean" and "policy_score" (f16/f32
// [n_head_kv, n_tok]), "keys_pca" ([n_head_kv, n_tok, 2]), "channel_mean" and "channel_cv"
// (f32 [n_head_kv, head_dim]); step metrics "kl", "top1", "bytes_read", "selection_recall"; run blob
// "topk_unique" (i64 [n_layer, n_head]) and "needle_tokens" (kvscope-cli eval, i64 [n, 2]).
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "budget_text.h"
#include "kvscope/core/timeline.h"
#include "kvscope/sessions/session_store.h"
#include "kvscope/sessions/turn_blobs.h"

namespace kvscope::figures {

/// Per-head summary metric names, in the column order of the "head_summary" blob
/// (= core capture.h summary_metric_names(); a test checks they agree).
const std::vector<std::string>& head_summary_names();
/// A short human label of a summary metric ("attention entropy (nats)", ...); the name if unknown.
std::string metric_label(const std::string& name);

/// A run of a database: database path + run id.
struct RunRef {
  std::string db;
  std::int64_t run = -1;
  friend bool operator==(const RunRef&, const RunRef&) = default;
  friend auto operator<=>(const RunRef&, const RunRef&) = default;
};

/// The heavy per-layer arrays of a run, decoded on demand. kKeepCount is one array for the whole
/// run (slot of layer 0), derived from every layer's kKept.
/// kTimeline is the run's Timeline (kvscope/sessions/timeline_blobs.h; slot of layer 0).
/// kScore is the decisive score the budget stage ranked (blob "policy_score", capture full).
enum class Part : int { kKept, kAttention, kCos, kPca, kChannelMean, kChannelCv, kKeepCount, kTimeline, kScore };
inline constexpr int kPartCount = 9;
/// True for the parts of the whole run (kKeepCount, kTimeline), held in the slot of layer 0.
constexpr bool run_level(Part p) { return p == Part::kKeepCount || p == Part::kTimeline; }
/// Blob name of a part ("kept_positions", "attention", "cos_to_mean", "keys_pca", "channel_mean",
/// "channel_cv", "policy_score"; "kept_positions" for kKeepCount; "timeline.info" for kTimeline).
std::string_view part_blob(Part p);
/// Short label for "loading" messages ("kept sets", "attention", ...).
const char* part_label(Part p);

/// One decoded (Part, layer).
struct LayerPart {
  /// kKept: [kv head] sorted, unique true prompt positions.
  std::vector<std::vector<std::int64_t>> kept;
  /// kAttention, kCos, kScore: [n_head_kv * n_tok]; kPca: [n_head_kv * n_tok * 2]; channels:
  /// [n_head_kv * head_dim]. Empty when the stored blob's shape does not match the run.
  std::vector<float> values;
  /// kKeepCount: per prompt position, how many (layer, KV head) pairs kept it.
  std::vector<std::uint32_t> counts;
  /// kTimeline: the run's record of cache decisions over time (null: the stored one is unreadable).
  std::shared_ptr<const Timeline> timeline;
};

/// Write-once slots of decoded parts, [Part][layer]. get() is lock-free; put() keeps the first value.
class PartSlots {
 public:
  explicit PartSlots(std::int64_t n_layer);
  ~PartSlots();
  PartSlots(const PartSlots&) = delete;
  PartSlots& operator=(const PartSlots&) = delete;
  /// The decoded part, or nullptr (not decoded yet, or layer out of range).
  const LayerPart* get(Part p, std::int64_t layer) const;
  /// Stores `v` unless the slot is already filled; returns the slot's part. Throws
  /// std::out_of_range for a layer outside [0, n_layer).
  const LayerPart* put(Part p, std::int64_t layer, LayerPart v);

 private:
  std::int64_t n_layer_;
  std::unique_ptr<std::atomic<const LayerPart*>[]> slots_;
  std::mutex mutex_;  // put()
  std::vector<std::unique_ptr<LayerPart>> owned_;
};

/// One run: the light part is immutable after load_run_data(); heavy parts fill in via load_part().
struct RunData {
  RunRef ref;
  sessions::RunRecord record;
  std::int64_t n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  std::int64_t n_tok = 0;  ///< prompt tokens
  /// Sliding window of layer l (0 = full attention; the model's, record.info.model.layer_window):
  /// such a layer keeps its window and is never compressed.
  std::int64_t window(std::int64_t l) const {
    const auto& w = record.info.model.layer_window;
    return l >= 0 && l < static_cast<std::int64_t>(w.size()) ? w[static_cast<std::size_t>(l)] : 0;
  }

  std::vector<std::string> token_text;  ///< display text per prompt token ("#id" without a tokenizer)
  /// The same per generated token of the first turn (record.outputs.tokens; position n_tok + i).
  std::vector<std::string> output_text;
  bool tokens_from_tokenizer = false;
  std::string tokenizer_note;  ///< why ids are shown (tokenizer not found, ...)

  /// A multi-turn run's turns (blobs "turns.*", sessions::load_turns; turn 0's input is the prompt):
  /// empty for a single-turn run. Their positions and steps: turn_spans.h.
  std::vector<sessions::Turn> turns;
  /// Per turn, its input and output as text (the token texts joined; "#id" without a tokenizer).
  std::vector<std::string> turn_input_text, turn_output_text;
  std::string turns_note;  ///< why the turns could not be read (a malformed blob); the run opens anyway

  /// What the run stored (from the blob listing; nothing decoded).
  bool has_kept = false, has_summary = false, has_attention = false, has_cos = false, has_channels = false,
       has_pca = false, has_timeline = false, has_score = false;
  /// Entries kept per [layer * n_head_kv + kv head], from the kept_positions blob shapes.
  std::vector<std::int64_t> kept_sizes;

  std::vector<std::string> summary_names;  ///< head_summary columns
  std::vector<float> summary;              ///< [n_layer, n_head_kv, n_summary]; NaN = not captured

  /// "topk_unique": distinct positions Exact-TopK picked over all decode steps, [topk_rows (layers),
  /// topk_cols (query heads)]; empty when not recorded.
  std::vector<float> topk_unique;
  std::int64_t topk_rows = 0, topk_cols = 0;

  /// "needle_tokens" (kvscope-cli eval): token ranges [begin, end) of the needles in the prompt,
  /// clipped to it; empty when not recorded.
  std::vector<std::pair<std::int64_t, std::int64_t>> needles;

  /// Step metrics by name ("kl", "top1", "bytes_read", ...): value per step (NaN for gaps).
  std::map<std::string, std::vector<double>> steps;
  /// Other stored blobs (not decoded): name, layer, head, shape.
  std::vector<sessions::BlobInfo> other_blobs;
  double load_ms = 0;  ///< load_run_data() wall time

  /// Decoded heavy parts (write-once; see load_part()).
  std::unique_ptr<PartSlots> parts;
  /// Whether the database holds part `p` of `layer` ([Part][layer], from the blob listing).
  std::vector<std::uint8_t> stored_parts;

  // ---- heavy parts -----------------------------------------------------------------------------
  /// True when the database holds part `p` of `layer` (kKeepCount: when the run stored kept sets).
  bool stored(Part p, std::int64_t layer) const;
  /// The decoded part, or nullptr (not decoded yet, or not stored).
  const LayerPart* part(Part p, std::int64_t layer) const;
  /// Nothing left to decode for (p, layer): decoded, or not stored.
  bool ready(Part p, std::int64_t layer) const { return !stored(p, layer) || part(p, layer) != nullptr; }

  // ---- accessors -----------------------------------------------------------------------------
  /// Summary metric m of (layer, kv head), NaN when absent.
  float metric(std::int64_t layer, std::int64_t head, std::size_t m) const;
  /// Index of summary metric `name`, or nullopt.
  std::optional<std::size_t> metric_index(const std::string& name) const;
  /// Sorted kept positions of (layer, head), or nullptr (kKept of the layer not decoded, no kept
  /// sets stored, or out of range).
  const std::vector<std::int64_t>* kept_set(std::int64_t layer, std::int64_t head) const;
  /// True when (layer, head) kept prompt position `pos`: always for a run without kept sets (full
  /// cache); false while the layer's kept sets are not decoded.
  bool kept_at(std::int64_t layer, std::int64_t head, std::int64_t pos) const;
  /// Entries kept by (layer, head) (from the blob listing); n_tok for a run without kept sets.
  std::int64_t kept_count(std::int64_t layer, std::int64_t head) const;
  /// Decoded float part `p` of `layer` (attention, cos, pca, channel mean / cv), or nullptr.
  const std::vector<float>* layer_values(Part p, std::int64_t layer) const;
  /// Attention of (layer, head) over prompt positions [n_tok], or nullptr when not decoded/captured.
  const float* attention_row(std::int64_t layer, std::int64_t head) const;
  /// The decisive score of (layer, head) [n_tok] (what the budget stage ranked; the largest finite
  /// float where always kept, NaN where never scored), or nullptr when not decoded/recorded.
  const float* score_row(std::int64_t layer, std::int64_t head) const;
  /// The pipeline's scoring-stage policy ("snapkv", ...), empty when it has none.
  std::string scorer() const;
  /// Cosine to the mean key of (layer, head) [n_tok], or nullptr.
  const float* cos_row(std::int64_t layer, std::int64_t head) const;
  /// Keys of (layer, head) on their two principal axes [n_tok, 2], or nullptr.
  const float* pca_row(std::int64_t layer, std::int64_t head) const;
  /// Per prompt position, (layer, KV head) pairs that kept it [n_tok], or nullptr when not decoded.
  const std::vector<std::uint32_t>* keep_count() const;
  /// The decoded timeline, or nullptr (not recorded, not decoded yet, or unreadable).
  const Timeline* timeline() const;
  /// Text of the token at true position `p` (a prompt token, or a first-turn generated one fed back
  /// at n_tok + i), or nullptr (a later turn's, or outside the run).
  const std::string* position_text(std::int64_t p) const;
  /// Summary metric value, NaN when absent.
  double summary_metric(const std::string& name) const;
  /// One line: "#id name · pipeline · budget".
  std::string title() const;
  /// Figure caption: pipeline, model, budget, prompt length, database.
  std::string caption() const;
  /// The budget as the kept share (run/budget_text.h): "kept 25% · 128/head (ratio 0.75)", "full cache".
  std::string budget_text() const;
  /// What the run kept of its prompt (summary metrics where stored, else from the budget).
  run::KeptShare kept_share() const;
  /// Short model name (last path component).
  std::string model_name() const;
};

/// Text of a token id, or nullopt (shown as "#id").
using TokenText = std::function<std::optional<std::string>(std::int32_t id)>;

/// Reads the light part of run `run` of `store` (a few ms also for 32 layers x 32 heads x 32K
/// tokens). Token texts come from `token_text` when given (else "#id", with `tokenizer_note` saying
/// why). Throws sessions::SessionError.
std::shared_ptr<RunData> load_run_data(const sessions::SessionStore& store, std::int64_t run,
                                       const TokenText& token_text, std::string tokenizer_note = "no tokenizer loaded");

/// Decodes part `p` of `layer` of `run` from `store` (the run's database, any connection) into
/// run.parts; no-op when decoded or not stored. kKeepCount decodes every layer's kKept first.
/// Thread-safe against readers and other load_part calls on the same run. Throws
/// sessions::SessionError, std::out_of_range for a layer outside the run.
void load_part(const sessions::SessionStore& store, const RunData& run, Part p, std::int64_t layer);

/// Display text of a token for the token views: control characters escaped ("\n" as U+21B5,
/// "\t" as U+2192), empty as U+2205.
std::string display_token(const std::string& text);

}  // namespace kvscope::figures
