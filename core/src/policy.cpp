#include "kvscope/core/policy.h"

#include "kvscope/core/errors.h"

namespace kvscope {

void PolicyRegistry::add(Entry e) {
  factories_[e.name] = std::move(e.make);
  catalog_.add({std::move(e.name), e.stage, std::move(e.spec), std::move(e.summary), std::move(e.score),
                std::move(e.layer_budget)});
}

std::unique_ptr<Policy> PolicyRegistry::make(const std::string& name, const ParamValues& values) const {
  const PolicyDescription& d = catalog_.at(name);
  return factories_.at(d.name)(resolve_params(d.name, d.params, values));
}

std::unique_ptr<Policy> PolicyRegistry::make(const ResolvedStage& stage) const {
  return factories_.at(stage.policy->name)(stage.params);
}

}  // namespace kvscope
