#pragma once
// Where each turn of a multi-turn run sits in the cache (GUI: the Timeline view's turn selector).
// Positions (core timeline.h): the first turn's input (the prompt, and a question-agnostic question)
// at step 0, then its generated tokens fed back one per decode step; each later turn's prefill is one
// step of its own that puts a block in the cache: the token chosen last before it (the previous
// turn's last output, or the stop token that ended it), then the turn's input ids. A turn that ran to
// max_new_tokens never feeds its last output during its own decoding: that token opens the next
// block (or, for the last turn, never enters). Pure; no GUI, no database.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kvscope/core/timeline.h"
#include "kvscope/sessions/turn_blobs.h"

namespace kvscope::figures {

/// One turn's positions and steps. Position ranges are [lo, hi).
struct TurnSpan {
  std::int64_t block_lo = 0, block_hi = 0;  ///< the block its prefill put in the cache
  /// Positions of its generated tokens in the cache: from block_hi on; when its last output opens
  /// the next turn's block, out_hi - 1 is that block's first position (the ranges share it).
  std::int64_t out_lo = 0, out_hi = 0;
  std::int64_t step = 0;       ///< the step at which the block entered (0: the first prefill)
  std::int64_t n_decode = 0;   ///< its decode steps: step + 1 .. step + n_decode
  bool stopped = false;        ///< ended on a stop token (which then opens the next block), not at the limit
  bool from_timeline = false;  ///< boundaries and step read from the timeline's entered_at
  /// The positions a view shows for the turn: its block and outputs, [first, last] inclusive.
  std::int64_t first() const { return block_lo; }
  std::int64_t last() const { return std::max(block_hi, out_hi) - 1; }
};

/// The spans of `turns` (sessions::load_turns; empty: none). From the lengths alone a turn counts
/// as stopped on a stop token when it generated fewer tokens than the longest turn (every turn has
/// the same max_new_tokens). With a timeline (`t`, or null) each later block is placed where its
/// positions entered at one step (entered_at), which settles a stop at the limit, and the steps are
/// entered_at's; where the record disagrees with the lengths, the lengths stand.
std::vector<TurnSpan> turn_spans(const std::vector<sessions::Turn>& turns, const Timeline* t = nullptr);

}  // namespace kvscope::figures
