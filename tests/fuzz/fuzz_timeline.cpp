// libFuzzer: a Timeline record (kvscope/core/timeline.h) built from bytes, as a damaged session
// could hand one to the readers. Oracle: check() accepts it, or nothing is read; for an accepted
// record every reader stays in bounds and agrees: the step cursor's live set equals
// live_positions() at every step, and every selection and exact top-k is a sorted subset of that
// live set.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "kvscope/core/timeline.h"

namespace {
struct Bytes {
  const uint8_t* p;
  size_t n, at = 0;
  int next() { return at < n ? p[at++] : 0; }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in{data, size};
  kvscope::Timeline t;
  t.n_layer = 1 + in.next() % 2;
  t.n_head_kv = 1 + in.next() % 2;
  t.n_positions = in.next() % 48;
  t.n_steps = in.next() % 12;
  t.page = in.next() % 6;  // 0 is refused by check()
  for (int64_t p = 0; p < t.n_positions; ++p) t.entered_at.push_back(in.next() % 16 - 1);
  const int64_t cells = t.n_layer * t.n_head_kv * t.n_positions;
  for (int64_t i = 0; i < cells; ++i) t.evicted_at.push_back(in.next() % 16 - 2);
  for (int64_t i = 0; i < cells; ++i) t.evicted_by.push_back(static_cast<uint8_t>(in.next() % 6));
  const bool with_pages = in.next() % 2, with_tokens = in.next() % 2, with_exact = in.next() % 2;
  for (auto* sel :
       {with_pages ? &t.pages : nullptr, with_tokens ? &t.tokens : nullptr, with_exact ? &t.exact : nullptr}) {
    if (!sel) continue;
    for (int64_t l = 0; l < t.n_layer; ++l) {
      kvscope::SelectionBits b;
      const int64_t entries = t.n_steps * t.n_head_kv + (in.next() % 8 == 0 ? 1 : 0);  // sometimes one too many
      for (int64_t e = 0; e < entries; ++e) {
        const int n = in.next() % 4;
        for (int i = 0; i < n; ++i) b.bits.push_back(static_cast<uint8_t>(in.next()));
        b.offsets.push_back(static_cast<int64_t>(b.bits.size()) - (in.next() % 16 == 0 ? 1 : 0));
      }
      sel->push_back(std::move(b));
    }
  }
  if (!t.check().empty()) return 0;
  for (int64_t l = 0; l < t.n_layer; ++l)
    for (int64_t h = 0; h < t.n_head_kv; ++h) {
      kvscope::TimelineCursor cursor(t, l, h);
      for (int64_t s = 0; s <= t.n_steps; ++s) {
        cursor.advance_to(s);
        const std::vector<int64_t> live = t.live_positions(l, h, s);
        if (cursor.live() != live) std::abort();
        const auto ex = t.exact_positions(l, h, s, &live);
        if (ex.has_value() != t.has_exact(l, h, s) || (ex && *ex != *t.exact_positions(l, h, s))) std::abort();
        for (const auto& set : {t.selected_positions(l, h, s, &live), ex}) {
          if (!set) continue;
          if (!std::is_sorted(set->begin(), set->end())) std::abort();
          if (std::adjacent_find(set->begin(), set->end()) != set->end()) std::abort();
          for (int64_t p : *set)
            if (!std::binary_search(live.begin(), live.end(), p)) std::abort();
        }
      }
    }
  return 0;
}
