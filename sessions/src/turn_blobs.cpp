#include "kvscope/sessions/turn_blobs.h"

#include <string>

namespace kvscope::sessions {
namespace {

/// ids of every turn, flattened, and the turn boundaries.
void add_ragged(std::vector<Blob>& out, const std::string& name, const std::vector<std::vector<int32_t>>& rows) {
  std::vector<int32_t> ids;
  std::vector<int64_t> offsets{0};
  for (const auto& r : rows) {
    ids.insert(ids.end(), r.begin(), r.end());
    offsets.push_back(static_cast<int64_t>(ids.size()));
  }
  out.push_back(Blob::of<int32_t>(name + "_ids", -1, -1, {static_cast<int64_t>(ids.size())}, ids));
  out.push_back(Blob::of<int64_t>(name + "_offsets", -1, -1, {static_cast<int64_t>(offsets.size())}, offsets));
}

}  // namespace

std::vector<Blob> turn_blobs(const std::vector<Turn>& turns) {
  std::vector<Blob> out;
  if (turns.size() < 2) return out;
  std::vector<std::vector<int32_t>> in, gen;
  for (const Turn& t : turns) {
    in.push_back(t.input_ids);
    gen.push_back(t.output_ids);
  }
  add_ragged(out, "turns.input", in);
  add_ragged(out, "turns.output", gen);
  return out;
}

std::vector<Turn> load_turns(const SessionStore& store, int64_t run) {
  auto bad = [&](const std::string& blob, const std::string& what) {
    return SessionError(store.path(), "run " + std::to_string(run) + ": blob '" + blob + "': " + what);
  };
  // Each side's rows: ids cut at offsets that start at 0, never fall, and end at the ids' count.
  auto rows = [&](const std::string& name) {
    const auto ids = store.load_blob(run, name + "_ids", -1, -1);
    const auto offsets = store.load_blob(run, name + "_offsets", -1, -1);
    std::vector<std::vector<int32_t>> out;
    if (!ids && !offsets) return out;
    if (!ids) throw bad(name + "_ids", "missing beside " + name + "_offsets");
    if (!offsets) throw bad(name + "_offsets", "missing beside " + name + "_ids");
    if (ids->dtype != DType::kI32) throw bad(name + "_ids", "dtype " + std::string(to_string(ids->dtype)));
    if (offsets->dtype != DType::kI64) throw bad(name + "_offsets", "dtype " + std::string(to_string(offsets->dtype)));
    const auto v = ids->values<int32_t>();
    const auto o = offsets->values<int64_t>();
    if (o.size() < 2 || o.front() != 0 || o.back() != static_cast<int64_t>(v.size()))
      throw bad(name + "_offsets", "does not cut the " + std::to_string(v.size()) + " ids into turns");
    for (size_t t = 0; t + 1 < o.size(); ++t) {
      if (o[t + 1] < o[t]) throw bad(name + "_offsets", "falls at turn " + std::to_string(t + 1));
      out.emplace_back(v.begin() + o[t], v.begin() + o[t + 1]);
    }
    return out;
  };
  const auto in = rows("turns.input"), gen = rows("turns.output");
  if (in.size() != gen.size())
    throw bad("turns.output_offsets",
              std::to_string(gen.size()) + " turns of outputs for " + std::to_string(in.size()) + " of inputs");
  std::vector<Turn> out;
  for (size_t t = 0; t < in.size(); ++t) out.push_back({in[t], gen[t]});
  return out;
}

}  // namespace kvscope::sessions
