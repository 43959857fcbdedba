#pragma once
// ModelConfig: the typed shape of a Llama-family model, parsed once from config.json or a llama2.c header.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace kvscope {

/// Which channel pairs RoPE rotates. HF checkpoints: rotate_half (channel i with i + head_dim/2).
/// Meta / llama2.c checkpoints: adjacent pairs (2i, 2i+1). RoFormer (Su et al. 2021), eq. 34.
enum class RopeLayout { kRotateHalf, kAdjacentPairs };

/// rope_scaling. kLinear: positions divided by `factor` (Chen et al. 2023, position interpolation).
/// kLlama3: per-frequency smoothing between `low_freq_factor` and `high_freq_factor` wavelengths
/// (Llama 3.1 report; HF `_compute_llama3_parameters`).
struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 } type = Type::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

/// Architecture of a decoder-only Llama-family transformer (llama, mistral, qwen2, llama2.c).
struct ModelConfig {
  std::string model_type = "llama";  ///< "llama" | "mistral" | "qwen2" | "llama2c"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;        ///< model dim
  int64_t intermediate_size = 0;  ///< SwiGLU hidden dim
  int64_t n_layer = 0;
  int64_t n_head = 0;     ///< query heads
  int64_t n_head_kv = 0;  ///< key/value heads (GQA: n_head % n_head_kv == 0)
  int64_t head_dim = 0;   ///< explicit in config.json or hidden_size / n_head
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  RopeLayout rope_layout = RopeLayout::kRotateHalf;
  bool qkv_bias = false;  ///< qwen2 (and llama with attention_bias=true)
  bool tie_word_embeddings = false;
  int64_t max_position_embeddings = 4096;
  int64_t sliding_window = 0;  ///< mistral: 0 = none. Informational; the engine attends to the full cache.
  int32_t bos_token_id = -1;   ///< -1 = none
  std::vector<int32_t> eos_token_ids;
  std::string weights_dtype = "float32";  ///< dtype the checkpoint stores ("bfloat16", ...)

  /// Group size G = n_head / n_head_kv.
  int64_t group_size() const { return n_head / n_head_kv; }
  /// Total parameter count implied by the shapes.
  int64_t parameter_count() const;
  /// Throws InputError(source, ...) if any dimension is inconsistent, or a value cannot be:
  /// max_position_embeddings <= 0, rms_norm_eps or rope_theta not a finite number > 0.
  void validate(const std::filesystem::path& source) const;
};

/// Parses a Hugging Face config.json (plus generation_config.json beside it for extra EOS ids).
/// Accepts model_type llama | mistral | qwen2; rope_theta or rope_parameters.rope_theta;
/// rope_scaling / rope_parameters of type default | linear | llama3.
/// Throws InputError(path, ...) for a missing file, bad JSON, unknown model_type or missing fields.
ModelConfig parse_hf_config(const std::filesystem::path& config_json);

/// Same, from already-parsed JSON; `source` names the file in error messages.
ModelConfig parse_hf_config_json(const nlohmann::json& j, const std::filesystem::path& source);

}  // namespace kvscope
