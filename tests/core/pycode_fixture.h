#pragma once
// A suite fixture holding pycode-16m (fp32, CPU) and the built-in policy registry, loaded once per
// test process.
#include <gtest/gtest.h>

#include "kvscope/core/model.h"
#include "kvscope/core/policy.h"
#include "test_support.h"

namespace kvscope::test {

class PycodeSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new Model(load_model(pycode_dir(), LoadOptions{}));
    registry_ = new PolicyRegistry;
    register_builtin_policies(*registry_);
  }
  static void TearDownTestSuite() {
    delete model_;
    delete registry_;
    model_ = nullptr;
    registry_ = nullptr;
  }
  /// BOS + tokens of golden/prompts/textwrap_head.py (514 ids).
  static std::vector<int32_t> textwrap_ids() {
    return read_json(pycode_dir() / "golden/textwrap_head.json")["input_ids"].get<std::vector<int32_t>>();
  }
  static inline Model* model_ = nullptr;
  static inline PolicyRegistry* registry_ = nullptr;
};

}  // namespace kvscope::test
