#pragma once
// A small Llama-shaped ModelConfig for the core tests (policies, caches, kernels' policy paths).
#include <cstdint>

#include "kvscope/core/model_config.h"

namespace kvscope::test {

/// n_head = n_head_kv * group, hidden_size = n_head * head_dim; every other field its default.
inline ModelConfig small_config(int64_t n_layer, int64_t n_head_kv, int64_t group, int64_t head_dim) {
  ModelConfig c;
  c.n_layer = n_layer;
  c.n_head_kv = n_head_kv;
  c.n_head = n_head_kv * group;
  c.head_dim = head_dim;
  c.hidden_size = c.n_head * head_dim;
  return c;
}

}  // namespace kvscope::test
