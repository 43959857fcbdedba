// kvscope-cli policies: the registered policies with their parameters (from each ParamSpec), and
// the presets.
#include <algorithm>
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "kvscope/core/policy.h"
#include "kvscope/core/presets.h"

namespace kvscope::cli {

Runner add_policies(CLI::App& app) {
  auto* cmd = app.add_subcommand("policies", "List compression policies, their parameters and the presets");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print one JSON object");
  return [json]() {
    PolicyRegistry registry;
    register_builtin_policies(registry);
    nlohmann::json out;
    std::vector<const PolicyDescription*> by_name;  // listed by name, as `policies` always has
    for (const auto& e : registry.catalog().policies()) by_name.push_back(&e);
    std::sort(by_name.begin(), by_name.end(), [](const auto* a, const auto* b) { return a->name < b->name; });
    for (const PolicyDescription* e : by_name) {
      const std::string stage(stage_info(e->stage).label);
      nlohmann::json params = nlohmann::json::array();
      for (const auto& p : e->params)
        params.push_back({{"key", p.key},
                          {"range", param_range_text(p)},
                          {"default", p.default_value},
                          {"help", p.help},
                          {"paper", p.paper_ref}});
      out["policies"].push_back({{"name", e->name}, {"stage", stage}, {"summary", e->summary}, {"params", params}});
      if (!e->score.empty()) out["policies"].back()["score"] = e->score;
      if (!*json) {
        std::cout << e->name << "  (" << stage << ")  " << e->summary << "\n";
        if (!e->score.empty()) std::cout << "    score: " << e->score << "\n";
        for (const auto& p : e->params)
          std::cout << "    " << p.key << "=" << p.default_value << "  " << param_range_text(p) << "  " << p.help
                    << "  [" << p.paper_ref << "]\n";
      }
    }
    if (!*json) std::cout << "\npresets:\n";
    for (const auto& p : pipeline_presets()) {
      out["presets"].push_back({{"name", p.name},
                                {"spec", p.spec},
                                {"budget", p.budget},
                                {"budget_unit", std::string(budget_unit_name(p.unit))},
                                {"budget_value", p.value},
                                {"paper", p.paper_ref}});
      if (!*json) std::cout << "  " << p.name << " = " << p.spec << "   (" << p.budget << "; " << p.paper_ref << ")\n";
    }
    if (*json) std::cout << out.dump() << "\n";
    return 0;
  };
}

}  // namespace kvscope::cli
