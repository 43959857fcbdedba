#pragma once
// A suite fixture holding pycode-16m (fp32, CPU) and the built-in policy registry, loaded once per
// test process.
#include <gtest/gtest.h>

#include "kvscope/core/head_pattern.h"
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

/// Streaming (ring) and retrieval heads mixed over pycode-16m's 8 layers of 2 KV heads (G = 3,
/// D = 64), for a prompt that keeps 64 tokens: rings full after the prefill, filling and wrapping
/// during decode, without sinks, and an all-dense layer (the uniform path).
inline HeadPattern mixed_ring_pattern() {
  HeadPattern p;
  p.layers = {
      {HeadPlan{true, 4, 40}, HeadPlan{}},             // a ring full after the prefill (64 > 44)
      {HeadPlan{}, HeadPlan{true, 5, 90}},             // a ring filling during decode, then wrapping
      {HeadPlan{true, 0, 37}, HeadPlan{true, 3, 47}},  // two rings, no sink in one
      {HeadPlan{}, HeadPlan{}},                        // all dense: the uniform path
      {HeadPlan{true, 6, 30}, HeadPlan{}},
      {HeadPlan{}, HeadPlan{true, 2, 70}},
      {HeadPlan{true, 1, 25}, HeadPlan{true, 8, 100}},
      {HeadPlan{}, HeadPlan{true, 4, 40}},
  };
  return p;
}

}  // namespace kvscope::test
