// kvscope-cli policies: the registered policies with their parameters (from each ParamSpec), and
// the presets.
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "kvscope/core/policy.h"
#include "kvscope/core/presets.h"

namespace kvscope::cli {
namespace {

const char* stage_name(Stage s) {
  switch (s) {
    case Stage::kHeadPattern: return "S0 head pattern";
    case Stage::kScoring: return "S1 scoring";
    case Stage::kBudget: return "S2 budget";
    case Stage::kRetention: return "S3 retention";
    case Stage::kChannel: return "S4 channel pruning";
    case Stage::kDecodeSelection: return "S5 decode selection";
    case Stage::kMaintenance: return "S6 maintenance";
    case Stage::kMultiTurn: return "S7 multi-turn";
  }
  return "?";
}

std::string range_of(const ParamSpec& p) {
  switch (p.type) {
    case ParamSpec::Type::kInt:
    case ParamSpec::Type::kFloat: {
      std::ostringstream os;
      os << "[" << p.min << ", " << p.max << "]";
      return os.str();
    }
    case ParamSpec::Type::kChoice: {
      std::string c;
      for (const auto& s : p.choices) c += (c.empty() ? "" : "|") + s;
      return c;
    }
    case ParamSpec::Type::kBool: return "true|false";
    case ParamSpec::Type::kPath: return "file";
  }
  return "";
}

}  // namespace

Runner add_policies(CLI::App& app) {
  auto* cmd = app.add_subcommand("policies", "List compression policies, their parameters and the presets");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print one JSON object");
  return [json]() {
    PolicyRegistry registry;
    register_builtin_policies(registry);
    nlohmann::json out;
    for (const auto& name : registry.names()) {
      const auto& e = registry.at(name);
      nlohmann::json params = nlohmann::json::array();
      for (const auto& p : e.spec)
        params.push_back({{"key", p.key}, {"range", range_of(p)}, {"default", p.default_value}, {"help", p.help}, {"paper", p.paper_ref}});
      out["policies"].push_back({{"name", name}, {"stage", stage_name(e.stage)}, {"summary", e.summary}, {"params", params}});
      if (!*json) {
        std::cout << name << "  (" << stage_name(e.stage) << ")  " << e.summary << "\n";
        for (const auto& p : e.spec)
          std::cout << "    " << p.key << "=" << p.default_value << "  " << range_of(p) << "  " << p.help << "  [" << p.paper_ref << "]\n";
      }
    }
    if (!*json) std::cout << "\npresets:\n";
    for (const auto& p : pipeline_presets()) {
      out["presets"].push_back({{"name", p.name}, {"spec", p.spec}, {"budget", p.budget}, {"paper", p.paper_ref}});
      if (!*json) std::cout << "  " << p.name << " = " << p.spec << "   (" << p.budget << "; " << p.paper_ref << ")\n";
    }
    if (*json) std::cout << out.dump() << "\n";
    return 0;
  };
}

}  // namespace kvscope::cli
