#pragma once
// Internal header of every built-in policy family: builders of the ParamSpec rows that a registry
// entry declares (key, range or choices, default, help, paper reference). Defined in common.cpp.
// Used by the policy files whose *_entry() lists parameters itself: adakv, exacttopk, h2o, hsa,
// keydiff, pyramid, quest, random, spark, sparq, streamingllm, think and tova .cpp (and common.cpp
// for snapkv_spec).
#include <string>
#include <vector>

#include "kvscope/core/policy.h"

namespace kvscope::policies {

ParamSpec int_param(std::string key, double min, double max, std::string def, std::string help, std::string ref);
ParamSpec float_param(std::string key, double min, double max, std::string def, std::string help, std::string ref);
ParamSpec bool_param(std::string key, std::string def, std::string help, std::string ref);
ParamSpec choice_param(std::string key, std::vector<std::string> choices, std::string def, std::string help,
                       std::string ref);

}  // namespace kvscope::policies
