#pragma once
// How a run's Timeline (kvscope/core/timeline.h) is stored: blobs beside the captures, so a session
// of any schema version since v4 can hold one and a run without one reads as "no timeline".
// docs/sessions.md "Timeline" lists them:
//   layer -1  "timeline.info"         i64 [4]: format 1, n_steps, n_positions, page
//   layer -1  "timeline.entered_at"   i32 [n_positions]
//   layer -1  "timeline.recall"       f32 [n_steps, n_layer, n_head_kv] (capture full)
//   layer l   "timeline.evicted_at"   i32 [n_head_kv, n_positions] (-1 = never)
//   layer l   "timeline.evicted_by"   u8  [n_head_kv, n_positions] (EvictionCause)
//   layer l   "timeline.pages"        u8  [bytes] + "timeline.pages_offsets" i64 [n_steps * n_head_kv + 1]
//   layer l   "timeline.tokens"       u8  [bytes] + "timeline.tokens_offsets" (pinned heads)
//   layer l   "timeline.exact"        u8  [bytes] + "timeline.exact_offsets" (their exact top-k, capture
//                                     full; absent: not recorded)
#include <cstdint>
#include <optional>
#include <vector>

#include "kvscope/core/timeline.h"
#include "kvscope/sessions/session_store.h"

namespace kvscope::sessions {

/// The blobs that store `t` (nothing for an empty timeline).
std::vector<Blob> timeline_blobs(const Timeline& t);

/// The timeline of `run`, or nullopt when it has none. n_layer and n_head_kv come from the run's
/// model. Throws SessionError naming the database, the run and the blob when one is malformed.
std::optional<Timeline> load_timeline(const SessionStore& store, int64_t run);

}  // namespace kvscope::sessions
