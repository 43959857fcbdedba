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

/// rope_scaling / rope_parameters, as transformers' modeling_rope_utils.py (5.x) computes them;
/// kvscope/core/rope.h turns them into frequencies. parse_hf_config resolves every default, so the
/// fields hold the values in force:
/// - kLinear: positions divided by `factor` (Chen et al. 2023, position interpolation).
/// - kLlama3: per-frequency smoothing between `low_freq_factor` and `high_freq_factor` wavelengths
///   of `original_max_position_embeddings` (Llama 3.1 report; HF `_compute_llama3_parameters`).
/// - kDynamic: dynamic NTK (HF `_compute_dynamic_ntk_parameters`): above max_position_embeddings
///   the base grows with the forward's seq_len by `factor`; at or below it, the plain frequencies.
/// - kYarn: YaRN (Peng et al. 2023): NTK-by-parts between extrapolation and interpolation by
///   `factor`, ramped over the dimensions whose rotations over `original_max_position_embeddings`
///   lie between `beta_slow` and `beta_fast` (floor/ceil of the bounds when `truncate`); cos and sin
///   times attention_scaling(). Independent of seq_len.
/// - kLongRope: LongRoPE (Phi-3/3.5/4-mini): frequencies divided per dimension by `short_factor`
///   while seq_len <= `original_max_position_embeddings`, by `long_factor` above; cos and sin times
///   attention_scaling().
struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3, kDynamic, kYarn, kLongRope } type = Type::kNone;
  /// Scaling factor. kLongRope without one in the config: max_position_embeddings /
  /// original_max_position_embeddings (HF's Phi-3 rule), which may be <= 1 (then no attention scaling).
  double factor = 1.0;
  double low_freq_factor = 1.0;   ///< kLlama3
  double high_freq_factor = 4.0;  ///< kLlama3
  /// The pretraining context (kLlama3, kYarn, kLongRope). Parsed as HF 5.x standardizes it: a
  /// top-level `original_max_position_embeddings` first (Phi-3 style; for phi3 its default 4096),
  /// then the one in rope_scaling / rope_parameters, else max_position_embeddings.
  int64_t original_max_position_embeddings = 8192;
  double beta_fast = 32.0;  ///< kYarn: rotations that bound extrapolation (HF: 0 or absent = 32)
  double beta_slow = 1.0;   ///< kYarn: rotations that bound interpolation (HF: 0 or absent = 1)
  double mscale = 0;        ///< kYarn (DeepSeek): with mscale_all_dim, both non-zero, the attention factor's ratio
  double mscale_all_dim = 0;
  bool truncate = true;                           ///< kYarn: floor/ceil the correction range (gpt-oss: false)
  double attention_factor = 0;                    ///< kYarn, kLongRope: given in the config (> 0), or 0 = HF's default
  std::vector<double> short_factor, long_factor;  ///< kLongRope: rope_dim / 2 entries each

  /// The factor cos and sin are multiplied by (HF's `attention_scaling`): the given
  /// attention_factor, else kYarn: get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
  /// when both are non-zero, else 0.1 ln(factor) + 1 (1 when factor <= 1); kLongRope:
  /// sqrt(1 + ln(factor) / ln(original_max_position_embeddings)) (1 when factor <= 1); others 1.
  double attention_scaling() const;
};

/// The MLP's gated activation: SwiGLU silu(gate) * up (Llama, Qwen, Mistral, Phi-3) or GeGLU
/// gelu_tanh(gate) * up (Gemma 2/3, hidden_activation gelu_pytorch_tanh).
enum class GatedActivation { kSilu, kGeluTanh };

/// Architecture of a decoder-only transformer of the Llama family and its relatives (llama, mistral,
/// qwen2, qwen3, gemma2, gemma3_text, phi3, llama2.c). Beyond Llama (../shared/specs landscape §4-5):
/// per-head q/k RMSNorm, sandwich norms, (1+w) RMSNorm (folded into the weights at load), GeGLU,
/// scaled embeddings, soft-capping, query_pre_attn_scalar, partial rotary, per-layer sliding
/// windows and RoPE bases.
struct ModelConfig {
  std::string model_type =
      "llama";  ///< "llama" | "mistral" | "qwen2" | "qwen3" | "gemma2" | "gemma3_text" | "phi3" | "llama2c"
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
  int64_t sliding_window = 0;  ///< window of the sliding-attention layers (0 = none)
  /// Per layer: the sliding window it attends within (0 = full attention). From layer_types
  /// (gemma2/3, qwen3) or every layer for mistral's sliding_window. A query at position p sees keys
  /// at positions > p - window (HF's sliding-window causal mask).
  std::vector<int64_t> layer_window;
  /// Per layer RoPE base (gemma3: rope_parameters keyed by layer type; rope_local_base_freq);
  /// empty = rope_theta everywhere. Scaling applies to full-attention layers only.
  std::vector<double> layer_rope_theta;
  int64_t rotary_dim = 0;       ///< channels RoPE rotates (phi3 partial_rotary_factor); 0 = head_dim
  bool qk_norm = false;         ///< qwen3, gemma3: RMSNorm over head_dim of q and k before RoPE
  bool sandwich_norms = false;  ///< gemma2/3: norms after attention and after the MLP too
  GatedActivation activation = GatedActivation::kSilu;
  double embed_scale = 1.0;    ///< gemma: embeddings times sqrt(hidden_size) (in the weights' dtype)
  double attn_scale = 0;       ///< logit scale; 0 = 1/sqrt(head_dim) (gemma: query_pre_attn_scalar^-0.5)
  double attn_softcap = 0;     ///< gemma2: logits = cap * tanh(logits / cap); 0 = none
  double final_softcap = 0;    ///< gemma2: the same on the output logits
  bool norm_plus_one = false;  ///< gemma: RMSNorm scales by (1 + w) (added to the weights at load)
  int32_t bos_token_id = -1;   ///< -1 = none
  std::vector<int32_t> eos_token_ids;
  std::string weights_dtype = "float32";  ///< dtype the checkpoint stores ("bfloat16", ...)

  /// Group size G = n_head / n_head_kv.
  int64_t group_size() const { return n_head / n_head_kv; }
  /// Sliding window of layer l (0 = full attention).
  int64_t window(int64_t l) const { return l < static_cast<int64_t>(layer_window.size()) ? layer_window[l] : 0; }
  /// Channels RoPE rotates.
  int64_t rope_dim() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  /// What the fused CUDA decode kernels cannot take, comma-separated ("" when the fused path and
  /// the CUDA graph apply: every family feature above is fused; head_dim must be 64, 96, 128 or 256).
  std::string unfused_features() const;
  /// Total parameter count implied by the shapes.
  int64_t parameter_count() const;
  /// Throws InputError(source, ...) if any dimension is inconsistent, or a value cannot be:
  /// max_position_embeddings <= 0, rms_norm_eps or rope_theta not a finite number > 0.
  void validate(const std::filesystem::path& source) const;
};

/// Parses a Hugging Face config.json (plus generation_config.json beside it for extra EOS ids).
/// Accepts model_type llama | mistral | qwen2 | qwen3 | gemma2 | gemma3_text | gemma3 (its
/// text_config) | phi3; rope_theta or rope_parameters (also keyed by layer type);
/// rope_scaling / rope_parameters (rope_type or type) of type default | linear | llama3 | dynamic |
/// yarn | longrope (phi3 also su and yarn, as longrope, as transformers' Phi3Config does).
/// Throws InputError(path, ...) for a missing file, bad JSON, unknown model_type or missing fields.
ModelConfig parse_hf_config(const std::filesystem::path& config_json);

/// Same, from already-parsed JSON; `source` names the file in error messages.
ModelConfig parse_hf_config_json(const nlohmann::json& j, const std::filesystem::path& source);

}  // namespace kvscope
