#include "fidelity_tokens.h"

#include <algorithm>

namespace kvscope::gui {

FidelityTokens fidelity_tokens(const figures::RunData& r, const figures::TokenText& text) {
  FidelityTokens out;
  auto metric = [&](const char* name) -> const std::vector<double>* {
    const auto it = r.steps.find(name);
    return it == r.steps.end() ? nullptr : &it->second;
  };
  const auto *token = metric("token_id"), *full_top = metric("full_top_id");
  const std::string run = "run #" + std::to_string(r.ref.run);
  if (!full_top) {
    out.note = metric("kl") ? run +
                                  " predates the per-step token record (it stores KL and top-1 only): "
                                  "re-run it with the full-cache reference to see tokens"
                            : run + " has no full-cache reference: run with reference full to compare tokens";
    return out;
  }
  const auto *p_token = metric("p_token"), *p_full_top = metric("p_full_top"), *p_full_token = metric("p_full_token"),
             *kl = metric("kl");
  auto at = [](const std::vector<double>* v, std::size_t i) { return v && i < v->size() ? (*v)[i] : NAN; };
  auto id_of = [](double v) { return std::isfinite(v) ? static_cast<std::int32_t>(v) : -1; };
  auto decode = [&](std::int32_t id) -> std::string {
    if (id < 0) return "?";
    if (text)
      if (auto t = text(id)) return *t;
    return "#" + std::to_string(id);
  };
  const auto& outputs = r.record.outputs.tokens;
  const std::size_t n = full_top->size();
  out.steps.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    FidelityStepTokens& s = out.steps[i];
    // token_id is recorded with full_top_id; output token i is the same token in the first turn.
    s.token = token ? id_of(at(token, i)) : i < outputs.size() ? outputs[i] : -1;
    s.full_top = id_of((*full_top)[i]);
    s.p_token = at(p_token, i), s.p_full_top = at(p_full_top, i), s.p_full_token = at(p_full_token, i);
    s.kl = at(kl, i);
    s.in_output = i < outputs.size() && outputs[i] == s.token;
    s.text = s.in_output && i < r.output_text.size() ? r.output_text[i] : decode(s.token);
    s.full_text = s.agree() ? s.text : decode(s.full_top);
    out.differ += !s.agree();
  }
  return out;
}

}  // namespace kvscope::gui
