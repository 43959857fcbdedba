#pragma once
// Model: config + weights on a device + tokenizer, loaded from a HF directory, a llama2.c file,
// or built with random weights for speed work.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "kvscope/core/model_config.h"
#include "kvscope/core/tokenizer.h"

namespace kvscope {

/// Weights of one decoder layer, on the model's device and dtype. Projections are fused so one
/// matmul computes q, k and v (and one computes gate and up).
struct LayerWeights {
  at::Tensor attn_norm;  // [hidden]
  at::Tensor w_qkv;      // [(n_head + 2 n_head_kv) * head_dim, hidden]; rows: q heads, k heads, v heads
  at::Tensor b_qkv;      // [(n_head + 2 n_head_kv) * head_dim] or undefined (no bias)
  at::Tensor w_o;        // [hidden, n_head * head_dim]
  at::Tensor mlp_norm;   // [hidden]
  at::Tensor w_gate_up;  // [2 * intermediate, hidden]; rows: gate then up (SwiGLU)
  at::Tensor w_down;     // [hidden, intermediate]
  // Family extras (undefined when the family has none); Gemma's (1 + w) norms hold 1 + w.
  at::Tensor q_norm, k_norm;  // [head_dim]: qwen3, gemma3 per-head RMSNorm of q and k before RoPE
  at::Tensor post_attn_norm;  // [hidden]: gemma2/3, on the attention output before the residual add
  at::Tensor post_ffn_norm;   // [hidden]: gemma2/3, on the MLP output before the residual add
};

/// All weights. lm_head aliases embed when tie_word_embeddings.
struct ModelWeights {
  at::Tensor embed;       // [vocab, hidden]
  at::Tensor final_norm;  // [hidden]
  at::Tensor lm_head;     // [vocab, hidden]
  std::vector<LayerWeights> layers;
  /// Bytes of all distinct weight tensors (what one decode step reads).
  int64_t bytes() const;
};

/// Where and in what precision to materialise weights.
struct LoadOptions {
  c10::Device device = c10::Device(c10::kCPU);
  c10::ScalarType dtype = c10::kFloat;  ///< kFloat | kBFloat16 | kHalf
  std::filesystem::path tokenizer;      ///< optional override of the tokenizer file
};

/// A loaded model. Movable, not copyable.
struct Model {
  ModelConfig config;
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;  ///< null for --random-init models
  std::filesystem::path source;
  std::vector<int32_t> stop_token_ids;  ///< generation stops at any of these
  bool add_bos = false;  ///< the tokenizer's own convention (--bos auto): tokenizer_config add_bos_token, llama2.c
  c10::Device device = c10::Device(c10::kCPU);
  c10::ScalarType dtype = c10::kFloat;
};

/// Loads `path`: a HF directory (config.json + safetensors + tokenizer), or a llama2.c checkpoint
/// (.bin file, or a directory holding exactly one non-tokenizer .bin) with its tok*.bin.
/// Throws InputError naming the offending file (missing, truncated, shape mismatch, bad JSON,
/// unknown model_type).
Model load_model(const std::filesystem::path& path, const LoadOptions& options);

/// HF directory loader (see load_model).
Model load_hf_model(const std::filesystem::path& dir, const LoadOptions& options);

/// llama2.c "legacy v0" checkpoint: 7 x int32 header (dim, hidden_dim, n_layers, n_heads,
/// n_kv_heads, vocab_size (negative = untied classifier), seq_len), then fp32 arrays. RoPE rotates
/// adjacent pairs. Throws InputError(path, ...) for a short header or truncated payload.
Model load_llama2c_model(const std::filesystem::path& bin, const LoadOptions& options);

/// The config in a llama2.c checkpoint's header (`bytes` = the whole file), checked against the
/// file size the shapes imply (computed without overflow). Throws InputError(source, ...).
ModelConfig parse_llama2c_header(std::span<const uint8_t> bytes, const std::filesystem::path& source);

/// A model of the shape in `config_json` with N(0, 0.02) weights (norms = 1) created directly on
/// the device, for speed work on large shapes without downloading weights. No tokenizer.
Model random_init_model(const std::filesystem::path& config_json, const LoadOptions& options, uint64_t seed = 0);

/// Parses "fp32" | "bf16" | "fp16" (also "float32", "bfloat16", "float16").
/// Throws InputError("unknown dtype ...").
c10::ScalarType parse_dtype(const std::string& name);
/// "fp32" | "bf16" | "fp16".
std::string dtype_name(c10::ScalarType dtype);

}  // namespace kvscope
