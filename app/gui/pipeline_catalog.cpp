// make_catalog(): the torch-free copy of the PolicyRegistry the pipeline editor is generated from.
#include <algorithm>

#include "kvscope/core/policy.h"
#include "kvscope/core/presets.h"
#include "pipeline_editor.h"

namespace kvscope::gui {

PolicyCatalog make_catalog(const PolicyRegistry& registry) {
  PolicyCatalog c;
  for (const std::string& name : registry.names()) {
    const auto& e = registry.at(name);
    PolicyInfo p;
    p.name = e.name;
    p.stage = static_cast<int>(e.stage);
    p.stage_name = stage_name(p.stage);
    p.summary = e.summary;
    for (const auto& s : e.spec) {
      ParamInfo q;
      q.key = s.key;
      switch (s.type) {
        case ParamSpec::Type::kInt: q.kind = ParamKind::kInt; break;
        case ParamSpec::Type::kFloat: q.kind = ParamKind::kFloat; break;
        case ParamSpec::Type::kChoice: q.kind = ParamKind::kChoice; break;
        case ParamSpec::Type::kBool: q.kind = ParamKind::kBool; break;
        case ParamSpec::Type::kPath: q.kind = ParamKind::kPath; break;
      }
      q.min = s.min;
      q.max = s.max;
      q.default_value = s.default_value;
      q.choices = s.choices;
      q.help = s.help;
      q.paper_ref = s.paper_ref;
      p.params.push_back(std::move(q));
    }
    c.policies.push_back(std::move(p));
  }
  std::stable_sort(c.policies.begin(), c.policies.end(),
                   [](const PolicyInfo& a, const PolicyInfo& b) { return a.stage != b.stage ? a.stage < b.stage : a.name < b.name; });
  for (const auto& p : pipeline_presets()) c.presets.push_back({p.name, p.spec, p.budget, p.paper_ref});
  return c;
}

}  // namespace kvscope::gui
