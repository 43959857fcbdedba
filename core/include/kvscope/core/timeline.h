#pragma once
// Timeline: the time-resolved record of a run's cache decisions, per (layer, KV head, position) and
// decode step. Torch-free (kvscope_spec): core's TimelineRecorder fills it during generate(), the
// session store keeps it as blobs (docs/sessions.md "Timeline"), the CLI, export and GUI read it.
//
// Steps: step 0 is the first prefill (with its compression); decode forward pass n is step n
// (1-based, as the per-step metrics count); a later turn's prefill is one step of its own.
//
// Selections are stored in *rank space*: at step s the live entries of a head, sorted by position,
// have ranks 0 .. n_live(s) - 1. For heads that are not ring buffers, rank = storage row (kvscope's
// caches keep rows in position order), so a page of `page` ranks is the page a Quest / HSA side
// store summarises; for a streaming head the pages are of its sorted ring. A selection is kept as
// a bitmap over pages (every head) and over ranks (pinned heads, or every head of a small run).
// At capture full, the exact top-k each per-rank selection is measured against (RocketKV's
// Exact-TopK oracle, Behnam et al. 2025 §A.3 / Fig. 2; docs/methods.md §1.8, §7.10) is kept over
// ranks too, beside it.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvscope {

/// What removed an entry from a head's cache.
enum class EvictionCause : uint8_t {
  kNone = 0,     ///< never evicted (still live at the end)
  kPrefill = 1,  ///< the first prefill's compression (scoring + budget, head pattern, block-wise cap)
  kRing = 2,     ///< a streaming head's ring buffer (StreamingLLM §3, DuoAttention §3.2) or a sliding-window layer's
                 ///< window overwrote it
  kTurn = 3,     ///< a later turn's prefill reselected without it
  kDecode = 4,   ///< a decode-time eviction policy
};
/// "none" | "prefill" | "ring" | "turn" | "decode".
std::string_view to_string(EvictionCause c);

/// Bitmaps of one layer's selections: entry (s - 1) * n_head_kv + h (decode step s >= 1, KV head
/// h) is bits[offsets[e] .. offsets[e + 1]) (bit i of byte i / 8 is LSB-first unit i: a page or a
/// rank); an empty entry means nothing was recorded for that step and head.
struct SelectionBits {
  std::vector<uint8_t> bits;
  std::vector<int64_t> offsets{0};  ///< n_steps * n_head_kv + 1 once complete
  /// Bytes of entry e; 0 when e is past the recorded entries.
  int64_t size(int64_t e) const;
  /// Appends one entry of `n_units` bits, with `set` (unit indices, any order, < n_units) set.
  void append(int64_t n_units, const std::vector<int64_t>& set);
  /// Appends empty entries until there are `n` entries.
  void pad_to(int64_t n);
  int64_t entries() const { return static_cast<int64_t>(offsets.size()) - 1; }
};

/// The whole record. Array layouts are row-major; positions are true token positions.
struct Timeline {
  int64_t n_layer = 0, n_head_kv = 0;
  int64_t n_positions = 0;            ///< positions the run saw (prompt + fed-back tokens + later turns)
  int64_t n_steps = 0;                ///< steps after the first prefill (decode steps + later turns' prefills)
  int64_t page = 16;                  ///< ranks per page of `pages`
  std::vector<int32_t> entered_at;    ///< [n_positions]: step at which the position entered the cache
  std::vector<int32_t> evicted_at;    ///< [n_layer, n_head_kv, n_positions]: step it left; -1 = never
  std::vector<uint8_t> evicted_by;    ///< [n_layer, n_head_kv, n_positions]: EvictionCause
  std::vector<SelectionBits> pages;   ///< [n_layer]: per step and head, selected pages (empty: none)
  std::vector<SelectionBits> tokens;  ///< [n_layer]: per step and head, selected ranks (pinned heads)
  /// [n_layer], entries and rank space as `tokens`: per decode step and head, the ranks of the exact
  /// top-k that `recall` measures the selection against (capture full; heads recorded per token).
  /// k = entries selected. A selection shared by the KV group ([1, k]): the k largest group-summed
  /// q·k logits; one per query head ([G, k]): the union over the group of each query head's own k
  /// largest, so up to G·k ranks. Empty entry: not recorded (no recall that step, or a page-only
  /// head); empty vector: not recorded at all (capture summary, or a run recorded before it).
  std::vector<SelectionBits> exact;
  /// Per decode step, per (layer, KV head): share of the exact top-k (k = entries selected,
  /// group-summed q·k logits, or per query head for per-head selections) that the selection holds.
  /// [n_steps, n_layer, n_head_kv]; NaN where no selection or a dense step; empty when not recorded.
  std::vector<float> recall;

  bool empty() const { return n_layer == 0; }
  /// evicted_at of (layer, head, position); -1 never. Throws std::out_of_range outside the record.
  int32_t evicted_step(int64_t layer, int64_t head, int64_t position) const;
  /// Live positions of (layer, head) during step `step`, ascending: entered at or before it and not
  /// evicted at or before it. Throws std::out_of_range outside the record.
  std::vector<int64_t> live_positions(int64_t layer, int64_t head, int64_t step) const;
  /// True when step `step` of (layer, head) has a token-granular selection.
  bool has_tokens(int64_t layer, int64_t head, int64_t step) const;
  /// Positions selected by (layer, head) at decode step `step` (1 .. n_steps): at token granularity
  /// when recorded so, else every live position of the selected pages; nullopt when the step has no
  /// selection. `live` (optional) = live_positions(layer, head, step), to skip recomputing it.
  std::optional<std::vector<int64_t>> selected_positions(int64_t layer, int64_t head, int64_t step,
                                                         const std::vector<int64_t>* live = nullptr) const;
  /// What (layer, head) selected at decode step `step` as half-open rank ranges [a, b) over its
  /// live positions (consecutive ranks merged), for a head with `n_live` live entries then; nullopt
  /// when the step has no selection. `*token` (optional) says whether the record is per token.
  std::optional<std::vector<std::pair<int64_t, int64_t>>> selected_ranks(int64_t layer, int64_t head, int64_t step,
                                                                         int64_t n_live, bool* token = nullptr) const;
  /// True when step `step` of (layer, head) has an exact top-k record.
  bool has_exact(int64_t layer, int64_t head, int64_t step) const;
  /// Positions, ascending, of the exact top-k of (layer, head) at decode step `step` (1 .. n_steps)
  /// (see `exact`); nullopt when not recorded. `live` (optional) = live_positions(layer, head, step).
  /// Throws std::out_of_range outside the record.
  std::optional<std::vector<int64_t>> exact_positions(int64_t layer, int64_t head, int64_t step,
                                                      const std::vector<int64_t>* live = nullptr) const;
  /// Recall at (step, layer, head); NaN when absent.
  float recall_at(int64_t step, int64_t layer, int64_t head) const;
  /// Checks sizes against n_layer, n_head_kv, n_positions and n_steps. Returns the first problem,
  /// or an empty string.
  std::string check() const;
};

/// Walks one head's steps 0 .. n_steps in order, keeping its sorted live positions up to date from
/// entered_at / evicted_at (O(changes) per step), for figures that draw every step.
class TimelineCursor {
 public:
  TimelineCursor(const Timeline& t, int64_t layer, int64_t head);
  /// Moves to `step` (>= the current one; starts at 0).
  void advance_to(int64_t step);
  int64_t step() const { return step_; }
  const std::vector<int64_t>& live() const { return live_; }

 private:
  void apply(int64_t step);
  const Timeline& t_;
  int64_t layer_, head_, step_ = -1;
  std::vector<std::vector<int64_t>> enter_, leave_;  // per step: positions entering / leaving
  std::vector<int64_t> live_;
};

}  // namespace kvscope
