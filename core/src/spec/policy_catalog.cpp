#include "kvscope/core/policy_catalog.h"

#include <algorithm>
#include <string>

#include "kvscope/core/errors.h"

namespace kvscope {

void PolicyCatalog::add(PolicyDescription d) {
  auto same = std::find_if(policies_.begin(), policies_.end(), [&](const auto& p) { return p.name == d.name; });
  if (same != policies_.end()) policies_.erase(same);
  auto at = std::find_if(policies_.begin(), policies_.end(),
                         [&](const auto& p) { return p.stage != d.stage ? p.stage > d.stage : p.name > d.name; });
  policies_.insert(at, std::move(d));
}

const PolicyDescription* PolicyCatalog::find(std::string_view name) const {
  for (const auto& p : policies_)
    if (p.name == name) return &p;
  return nullptr;
}

const PolicyDescription& PolicyCatalog::at(std::string_view name) const {
  if (const PolicyDescription* p = find(name)) return *p;
  std::vector<std::string> names;
  for (const auto& p : policies_) names.push_back(p.name);
  std::sort(names.begin(), names.end());
  std::string known;
  for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
  throw InputError("unknown policy '" + std::string(name) + "' (known: " + known + ")");
}

std::vector<ResolvedStage> resolve_pipeline(const PolicyCatalog& catalog, std::string_view spec) {
  const std::string where = "pipeline '" + std::string(spec) + "'";
  std::vector<ResolvedStage> out;
  Stage last = Stage::kHeadPattern;
  int heads = 0, scoring = 0, layer_budget = 0, budget = 0, decode = 0, maintenance = 0, channel = 0;
  for (const StageSpec& s : expand_pipeline_presets(spec)) {
    const PolicyDescription& p = catalog.at(s.policy);
    ResolvedStage r{&p, resolve_params(p.name, p.params, s.params)};
    // A channel stage written after the selection it stacks under (a preset first: rocketkv+spark)
    // takes its place before it, in stage order.
    const bool channel_after_selection =
        p.stage == Stage::kChannel && (last == Stage::kDecodeSelection || last == Stage::kMultiTurn);
    if (p.stage < last && !channel_after_selection)
      throw InputError(where + ": stage '" + p.name + "' comes after a later stage");
    if (!channel_after_selection) last = p.stage;
    if (p.stage == Stage::kHeadPattern && heads++) throw InputError(where + ": more than one head-pattern stage");
    if (p.stage == Stage::kScoring && scoring++) throw InputError(where + ": more than one scoring stage");
    if (p.stage == Stage::kLayerBudget && layer_budget++)
      throw InputError(where + ": more than one layer-budget stage");
    if (p.stage == Stage::kBudget && budget++) throw InputError(where + ": more than one budget stage");
    if (p.stage == Stage::kMaintenance && maintenance++) throw InputError(where + ": more than one maintenance stage");
    // Channel pruning (S4) stacks under one decode-time selection (S5 / S7): the selection scores and
    // attends over the recovered keys (docs/methods.md §4.10).
    if (p.stage == Stage::kChannel && channel++) throw InputError(where + ": more than one channel-pruning stage");
    if (stage_info(p.stage).decode_time && p.stage != Stage::kChannel && decode++)
      throw InputError(where + ": more than one decode-time selection stage");
    if (channel_after_selection)
      out.insert(std::find_if(out.begin(), out.end(), [](const auto& x) { return x.policy->stage > Stage::kChannel; }),
                 std::move(r));
    else
      out.push_back(std::move(r));
  }
  if (channel && decode) {
    const ResolvedStage& c =
        *std::find_if(out.begin(), out.end(), [](const auto& r) { return r.policy->stage == Stage::kChannel; });
    const auto sign = c.params.find("sign");
    if (sign != c.params.end() && sign->second == "positive")
      throw InputError(where + ": " + c.policy->name +
                       " with sign=positive recovers the pruned channels as a logit term of each entry, not as a "
                       "key, so a selection stage after it has no keys to score; use sign=key");
  }
  if (!heads && !scoring && !decode && !channel)
    throw InputError(where + " has no head-pattern, scoring or decode-time stage (e.g. snapkv, keydiff, quest)");
  if (heads && scoring) throw InputError(where + ": a head pattern with a scoring stage is not supported yet");
  if (maintenance && !scoring)
    throw InputError(where + ": eviction while decoding ranks entries with a scoring stage; add one (e.g. tova)");
  if (maintenance && (decode || channel))
    throw InputError(where +
                     ": eviction while decoding with a decode-time attention stage is not supported (its side "
                     "stores do not follow the evicted rows)");
  if (layer_budget && !scoring)
    throw InputError(where + ": a layer budget allocates the entries a scoring stage ranks; add one (e.g. pyramidkv)");
  // Defaults go right after the stage before them, so the canonical SPEC keeps stage order.
  const auto find = [&](Stage s) {
    return std::find_if(out.begin(), out.end(), [s](const auto& r) { return r.policy->stage == s; });
  };
  const auto after = [&](Stage s) { return find(s) + 1; };
  if (scoring && !layer_budget) {  // the layer schedule the scorer's paper defines, if any
    const PolicyDescription* scorer = find(Stage::kScoring)->policy;
    if (!scorer->layer_budget.empty()) {
      const PolicyDescription& lb = catalog.at(scorer->layer_budget);
      out.insert(after(Stage::kScoring), ResolvedStage{&lb, resolve_params(lb.name, lb.params, {})});
      layer_budget = 1;
    }
  }
  if (scoring && !budget)  // uniform head allocation
    if (const PolicyDescription* uniform = catalog.find("uniform"))
      out.insert(after(layer_budget ? Stage::kLayerBudget : Stage::kScoring),
                 ResolvedStage{uniform, resolve_params(uniform->name, uniform->params, {})});
  return out;
}

std::string canonical_spec(const std::vector<ResolvedStage>& stages) {
  std::vector<StageSpec> specs;
  for (const auto& s : stages) specs.push_back({s.policy->name, s.params});
  return write_pipeline_spec(specs);
}

bool pipeline_uses_budget(const std::vector<ResolvedStage>& stages) {
  return std::any_of(stages.begin(), stages.end(),
                     [](const auto& s) { return stage_info(s.policy->stage).uses_budget; });
}

}  // namespace kvscope
