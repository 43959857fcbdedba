#include "ab_mismatch.h"

#include <algorithm>

namespace kvscope::gui {
namespace {

std::string shape(const sessions::ModelInfo& m) {
  return std::to_string(m.n_layer) + " layers x " + std::to_string(m.n_head_kv) + " KV heads x " +
         std::to_string(m.head_dim);
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i)
    out += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return out;
}

}  // namespace

AbMismatch ab_mismatch(const sessions::RunRecord& a, const sessions::RunRecord& b) {
  AbMismatch m;
  std::vector<std::string> detail;
  const auto& pa = a.info.prompt.tokens;
  const auto& pb = b.info.prompt.tokens;
  if (pa != pb) {
    m.prompt = true;
    m.what.push_back("prompt");
    if (pa.size() != pb.size()) {
      detail.push_back("prompt (A " + std::to_string(pa.size()) + " tokens, B " + std::to_string(pb.size()) + ")");
    } else {
      const auto at = std::mismatch(pa.begin(), pa.end(), pb.begin()).first - pa.begin();
      detail.push_back("prompt (both " + std::to_string(pa.size()) + " tokens, first different id at position " +
                       std::to_string(at) + ")");
    }
  }
  const auto& ma = a.info.model;
  const auto& mb = b.info.model;
  if (ma.path != mb.path) {
    m.what.push_back("model path");
    detail.push_back("model path (A " + ma.path + ", B " + mb.path + ")");
  }
  const bool same_shape = ma.n_layer == mb.n_layer && ma.n_head_kv == mb.n_head_kv && ma.head_dim == mb.head_dim;
  if (ma.config_hash != mb.config_hash || ma.model_type != mb.model_type || !same_shape) {
    m.what.push_back("model config");
    detail.push_back(same_shape ? "model config (hash A " + ma.config_hash + ", B " + mb.config_hash + ")"
                                : "model config (A " + shape(ma) + ", B " + shape(mb) + ")");
  }
  if (!m.any()) return m;
  m.line = "B #" + std::to_string(b.row.id) + " differs from A #" + std::to_string(a.row.id) + " in " + join(detail) +
           (m.prompt || !same_shape ? ": kept sets and A \xe2\x88\x92 B views are not defined"
                                    : ": its metrics are of another model");
  return m;
}

}  // namespace kvscope::gui
