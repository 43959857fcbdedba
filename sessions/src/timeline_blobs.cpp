#include "kvscope/sessions/timeline_blobs.h"

#include <string>

namespace kvscope::sessions {
namespace {
constexpr int64_t kFormat = 1;

void add_selection(std::vector<Blob>& out, const std::string& name, int64_t layer, const SelectionBits& s) {
  out.push_back(Blob::of<uint8_t>(name, layer, -1, {static_cast<int64_t>(s.bits.size())}, s.bits));
  out.push_back(Blob::of<int64_t>(name + "_offsets", layer, -1, {static_cast<int64_t>(s.offsets.size())}, s.offsets));
}

template <class T>
std::vector<T> slice(const std::vector<T>& v, size_t begin, size_t n) {
  return std::vector<T>(v.begin() + static_cast<std::ptrdiff_t>(begin),
                        v.begin() + static_cast<std::ptrdiff_t>(begin + n));
}
}  // namespace

std::vector<Blob> timeline_blobs(const Timeline& t) {
  std::vector<Blob> out;
  if (t.empty()) return out;
  out.push_back(
      Blob::of<int64_t>("timeline.info", -1, -1, {4}, std::vector<int64_t>{kFormat, t.n_steps, t.n_positions, t.page}));
  out.push_back(Blob::of<int32_t>("timeline.entered_at", -1, -1, {t.n_positions}, t.entered_at));
  if (!t.recall.empty())
    out.push_back(Blob::of<float>("timeline.recall", -1, -1, {t.n_steps, t.n_layer, t.n_head_kv}, t.recall));
  const size_t per_layer = static_cast<size_t>(t.n_head_kv * t.n_positions);
  for (int64_t l = 0; l < t.n_layer; ++l) {
    out.push_back(Blob::of<int32_t>("timeline.evicted_at", l, -1, {t.n_head_kv, t.n_positions},
                                    slice(t.evicted_at, l * per_layer, per_layer)));
    out.push_back(Blob::of<uint8_t>("timeline.evicted_by", l, -1, {t.n_head_kv, t.n_positions},
                                    slice(t.evicted_by, l * per_layer, per_layer)));
    if (!t.pages.empty()) add_selection(out, "timeline.pages", l, t.pages[l]);
    if (!t.tokens.empty()) add_selection(out, "timeline.tokens", l, t.tokens[l]);
    if (!t.exact.empty()) add_selection(out, "timeline.exact", l, t.exact[l]);
  }
  return out;
}

std::optional<Timeline> load_timeline(const SessionStore& store, int64_t run) {
  const RunRecord rec = store.load_run(run);
  bool stored = false;
  for (const BlobInfo& b : rec.blobs) stored = stored || b.name == "timeline.info";
  if (!stored) return std::nullopt;
  auto bad = [&](const std::string& blob, const std::string& what) {
    return SessionError(store.path(), "run " + std::to_string(run) + ": blob '" + blob + "': " + what);
  };
  Timeline t;
  t.n_layer = rec.info.model.n_layer;
  t.n_head_kv = rec.info.model.n_head_kv;
  const auto info = store.load_blob(run, "timeline.info", -1, -1);
  if (!info || info->dtype != DType::kI64 || info->numel() != 4) throw bad("timeline.info", "expected i64 [4]");
  const auto v = info->values<int64_t>();
  if (v[0] != kFormat) throw bad("timeline.info", "format " + std::to_string(v[0]) + " is not 1 (a newer kvscope?)");
  t.n_steps = v[1];
  t.n_positions = v[2];
  t.page = v[3];
  if (t.n_steps < 0 || t.n_positions < 0 || t.page < 1 || t.n_layer < 1 || t.n_head_kv < 1 ||
      double(t.n_layer) * double(t.n_head_kv) * double(t.n_positions) > double(int64_t(1) << 40))
    throw bad("timeline.info", "impossible sizes");
  auto need = [&](const std::string& name, int64_t layer, DType dtype) {
    auto b = store.load_blob(run, name, layer, -1);
    if (!b) throw bad(name, "missing for layer " + std::to_string(layer));
    if (b->dtype != dtype) throw bad(name, "dtype " + std::string(to_string(b->dtype)));
    return *b;
  };
  t.entered_at = need("timeline.entered_at", -1, DType::kI32).values<int32_t>();
  if (const auto r = store.load_blob(run, "timeline.recall", -1, -1)) t.recall = r->values<float>();
  bool pages = false, tokens = false, exact = false;
  for (const BlobInfo& b : rec.blobs) {
    pages = pages || b.name == "timeline.pages";
    tokens = tokens || b.name == "timeline.tokens";
    exact = exact || b.name == "timeline.exact";
  }
  // A selection bitmap of layer l: an entry per decode step and head, offsets within the bits.
  auto selection = [&](const std::string& name, int64_t l) {
    SelectionBits s;
    s.bits = need(name, l, DType::kU8).values<uint8_t>();
    s.offsets = need(name + "_offsets", l, DType::kI64).values<int64_t>();
    if (s.entries() != t.n_steps * t.n_head_kv)
      throw bad(name + "_offsets",
                "layer " + std::to_string(l) + ": " + std::to_string(s.offsets.size()) +
                    " offsets, expected n_steps x n_head_kv + 1 = " + std::to_string(t.n_steps * t.n_head_kv + 1));
    for (size_t i = 0; i < s.offsets.size(); ++i)
      if ((i ? s.offsets[i] < s.offsets[i - 1] : s.offsets[i] != 0) ||
          s.offsets[i] > static_cast<int64_t>(s.bits.size()) ||
          (i + 1 == s.offsets.size() && s.offsets[i] != static_cast<int64_t>(s.bits.size())))
        throw bad(name + "_offsets", "layer " + std::to_string(l) + ": offset " + std::to_string(i) + " (" +
                                         std::to_string(s.offsets[i]) + ") does not index the " +
                                         std::to_string(s.bits.size()) + " bytes of '" + name + "' in order");
    return s;
  };
  for (int64_t l = 0; l < t.n_layer; ++l) {
    const auto at = need("timeline.evicted_at", l, DType::kI32).values<int32_t>();
    const auto by = need("timeline.evicted_by", l, DType::kU8).values<uint8_t>();
    t.evicted_at.insert(t.evicted_at.end(), at.begin(), at.end());
    t.evicted_by.insert(t.evicted_by.end(), by.begin(), by.end());
    if (pages) t.pages.push_back(selection("timeline.pages", l));
    if (tokens) t.tokens.push_back(selection("timeline.tokens", l));
    if (exact) t.exact.push_back(selection("timeline.exact", l));
  }
  if (const std::string problem = t.check(); !problem.empty()) throw bad("timeline.*", problem);
  return t;
}

}  // namespace kvscope::sessions
