#pragma once
// How a multi-turn run's turns are stored: blobs beside the captures (docs/sessions.md "Turns"), so
// a session of any schema version can hold them and a single-turn run reads as "no turns":
//   layer -1  "turns.input_ids"       i32 [Σ inputs]   every turn's own tokens, turn after turn
//   layer -1  "turns.input_offsets"   i64 [n_turns + 1] turn t's inputs: [offsets[t], offsets[t + 1])
//   layer -1  "turns.output_ids"      i32 [Σ outputs]  every turn's generated tokens
//   layer -1  "turns.output_offsets"  i64 [n_turns + 1]
// Turn 0's input is the prompt (and a question-agnostic question after it); a later turn's is the
// user turn as given, without the previous turn's last token that generation feeds before it.
#include <cstdint>
#include <vector>

#include "kvscope/sessions/session_store.h"

namespace kvscope::sessions {

/// One turn of a conversation on one cache.
struct Turn {
  std::vector<int32_t> input_ids;   ///< the tokens the user gave this turn
  std::vector<int32_t> output_ids;  ///< the tokens generated after them
  bool operator==(const Turn&) const = default;
};

/// The blobs that store `turns` (nothing for fewer than two: a single-turn run's prompt and output
/// are the run's own).
std::vector<Blob> turn_blobs(const std::vector<Turn>& turns);

/// The turns of `run`: empty when it recorded none (a single-turn run, or one still running).
/// Throws SessionError naming the database, the run and the blob when one is malformed.
std::vector<Turn> load_turns(const SessionStore& store, int64_t run);

}  // namespace kvscope::sessions
