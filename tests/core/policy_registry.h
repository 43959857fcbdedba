#pragma once
// The built-in policies for the core tests, registered once per test binary.
#include "kvscope/core/policy.h"

namespace kvscope::test {

inline const PolicyRegistry& builtin_registry() {
  static const PolicyRegistry r = [] {
    PolicyRegistry reg;
    register_builtin_policies(reg);
    return reg;
  }();
  return r;
}

}  // namespace kvscope::test
