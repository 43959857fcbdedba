#include "turn_spans.h"

#include <algorithm>

namespace kvscope::figures {
namespace {

// Generated tokens of a turn that entered the cache during its own decoding.
std::int64_t fed(const sessions::Turn& turn, bool stopped) {
  const auto n = static_cast<std::int64_t>(turn.output_ids.size());
  return stopped ? n : std::max<std::int64_t>(n - 1, 0);
}

// True when positions [lo, lo + n) of `t` all entered at one step and lo is the first of that step.
bool one_block(const Timeline& t, std::int64_t lo, std::int64_t n) {
  if (lo < 0 || n < 1 || lo + n > t.n_positions || static_cast<std::int64_t>(t.entered_at.size()) < t.n_positions)
    return false;
  const auto at = [&](std::int64_t p) { return t.entered_at[static_cast<std::size_t>(p)]; };
  if (lo > 0 && at(lo - 1) == at(lo)) return false;
  for (std::int64_t p = lo + 1; p < lo + n; ++p)
    if (at(p) != at(lo)) return false;
  return true;
}

}  // namespace

std::vector<TurnSpan> turn_spans(const std::vector<sessions::Turn>& turns, const Timeline* t) {
  std::vector<TurnSpan> spans(turns.size());
  if (turns.empty()) return spans;
  std::size_t longest = 0;
  for (const auto& turn : turns) longest = std::max(longest, turn.output_ids.size());
  const bool timeline = t && !t->empty() && static_cast<std::int64_t>(t->entered_at.size()) >= t->n_positions;
  for (std::size_t i = 0; i < turns.size(); ++i) {
    TurnSpan& s = spans[i];
    s.stopped = turns[i].output_ids.size() < longest;
    const auto n_in = static_cast<std::int64_t>(turns[i].input_ids.size());
    if (i == 0) {
      s.block_lo = 0;
      s.block_hi = n_in;
      s.step = 0;
      s.from_timeline = timeline && (n_in == 0 || one_block(*t, 0, n_in));
    } else {
      TurnSpan& prev = spans[i - 1];
      const std::int64_t block = 1 + n_in;  // the token chosen last, then the input
      // Where the previous turn's decoding ended: at the limit or on a stop token. The timeline
      // tells them apart when exactly one of the two places starts a block of one step.
      if (timeline && n_in > 0) {
        const bool at_limit = one_block(*t, prev.block_hi + fed(turns[i - 1], false), block);
        const bool on_stop = one_block(*t, prev.block_hi + fed(turns[i - 1], true), block);
        if (at_limit != on_stop) prev.stopped = on_stop;
      }
      prev.n_decode = fed(turns[i - 1], prev.stopped);
      s.block_lo = prev.block_hi + prev.n_decode;
      s.block_hi = s.block_lo + block;
      s.step = prev.step + prev.n_decode + 1;
      s.from_timeline = timeline && one_block(*t, s.block_lo, block);
      prev.out_lo = prev.block_hi;
      prev.out_hi = s.block_lo + (prev.stopped || turns[i - 1].output_ids.empty() ? 0 : 1);
    }
  }
  TurnSpan& last = spans.back();
  if (timeline) {  // the last turn: what is left of the record
    const std::int64_t left = t->n_positions - last.block_hi;
    const auto n = static_cast<std::int64_t>(turns.back().output_ids.size());
    if (n > 0 && left == n) last.stopped = true;
    if (n > 0 && left == n - 1) last.stopped = false;
  }
  last.n_decode = fed(turns.back(), last.stopped);
  last.out_lo = last.block_hi;
  last.out_hi = last.block_hi + last.n_decode;
  if (timeline)
    for (TurnSpan& s : spans)
      if (s.from_timeline && s.block_lo < t->n_positions) s.step = t->entered_at[static_cast<std::size_t>(s.block_lo)];
  return spans;
}

}  // namespace kvscope::figures
