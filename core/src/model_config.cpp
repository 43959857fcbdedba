#include "kvscope/core/model_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "json_file.h"
#include "json_integers.h"
#include "kvscope/core/errors.h"

namespace kvscope {
namespace {

using nlohmann::json;

ModelConfig parse_hf_config_fields(const json& j, const std::filesystem::path& source);

int64_t require_int(const json& j, const char* key, const std::filesystem::path& source) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer())
    throw InputError(source, std::string("missing or non-integer field '") + key + "'");
  return it->get<int64_t>();
}

/// An optional integer field: `fallback` if absent or null, InputError if not an integer.
int64_t int_or(const json& j, const char* key, int64_t fallback, const std::filesystem::path& source) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  const auto v = json_integer(*it, INT64_MIN, INT64_MAX);
  if (!v) throw InputError(source, std::string("'") + key + "' must be an integer (got " + it->dump() + ")");
  return *v;
}

/// What the RoPE parameters depend on beyond their own object (HF 5.x `standardize_rope_params`).
struct RopeContext {
  std::string model_type;
  int64_t max_position_embeddings = 0;
  const json* top = nullptr;  ///< the config object, for a top-level original_max_position_embeddings
  bool layered = false;       ///< rope_parameters keyed by layer type (Gemma 3)
};

/// A JSON value for an error message, at most 40 characters.
std::string short_dump(const json& v) {
  const std::string d = v.dump();
  return d.size() <= 40 ? d : d.substr(0, 37) + "...";
}

/// An optional number field of the RoPE parameters: `fallback` if absent or null.
double rope_number(const json& s, const char* key, double fallback, const std::string& type,
                   const std::filesystem::path& source) {
  const auto it = s.find(key);
  if (it == s.end() || it->is_null()) return fallback;
  if (!it->is_number() || !std::isfinite(it->get<double>()))
    throw InputError(
        source, "rope scaling '" + type + "': '" + key + "' must be a finite number (got " + short_dump(*it) + ")");
  return it->get<double>();
}

/// A list of finite numbers > 0 (longrope's short_factor / long_factor).
std::vector<double> rope_factor_list(const json& s, const char* key, const std::string& type,
                                     const std::filesystem::path& source) {
  const auto it = s.find(key);
  if (it == s.end() || it->is_null())
    throw InputError(source, "rope scaling '" + type + "' needs '" + key + "' (a list of numbers)");
  if (!it->is_array()) throw InputError(source, "rope scaling '" + type + "': '" + key + "' must be a list of numbers");
  std::vector<double> out;
  for (const auto& v : *it) {
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
      throw InputError(source, "rope scaling '" + type + "': '" + key + "' holds " + short_dump(v) +
                                   " (entries must be finite numbers > 0)");
    out.push_back(v.get<double>());
  }
  return out;
}

/// rope_scaling (transformers < 5) or rope_parameters (>= 5), "rope_type" or its old spelling
/// "type", with every default resolved as transformers 5.x's modeling_rope_utils.py does.
RopeScaling parse_rope_scaling(const json& s, const RopeContext& ctx, const std::filesystem::path& source) {
  RopeScaling r;
  if (s.is_null()) return r;
  if (!s.is_object())
    throw InputError(source,
                     "rope_scaling / rope_parameters must be an object (got " + std::string(s.type_name()) + ")");
  const auto type_it = s.contains("rope_type") ? s.find("rope_type") : s.find("type");
  if (type_it != s.end() && !type_it->is_null() && !type_it->is_string())
    throw InputError(source, "rope scaling type must be a string (got " + short_dump(*type_it) + ")");
  std::string type = type_it == s.end() || type_it->is_null() ? "default" : type_it->get<std::string>();
  // Phi3Config maps its earlier names to longrope.
  if (ctx.model_type == "phi3" && (type == "su" || type == "yarn")) type = "longrope";
  if (type == "default") return r;
  if (type == "linear")
    r.type = RopeScaling::Type::kLinear;
  else if (type == "llama3")
    r.type = RopeScaling::Type::kLlama3;
  else if (type == "dynamic")
    r.type = RopeScaling::Type::kDynamic;
  else if (type == "yarn")
    r.type = RopeScaling::Type::kYarn;
  else if (type == "longrope")
    r.type = RopeScaling::Type::kLongRope;
  else
    throw InputError(source, "unsupported rope scaling type '" + type +
                                 "' (supported: default, linear, dynamic, yarn, longrope, llama3)");
  // The pretraining context: a top-level field wins (Phi-3 writes it there; Phi3Config defaults it
  // to 4096), then the RoPE parameters' own, then max_position_embeddings.
  if (r.type == RopeScaling::Type::kLlama3 || r.type == RopeScaling::Type::kYarn ||
      r.type == RopeScaling::Type::kLongRope) {
    int64_t orig = int_or(s, "original_max_position_embeddings", ctx.max_position_embeddings, source);
    if (!ctx.layered && ctx.top != nullptr)
      orig = int_or(*ctx.top, "original_max_position_embeddings", ctx.model_type == "phi3" ? 4096 : orig, source);
    if (orig <= 0)
      throw InputError(source, "rope scaling '" + type + "': original_max_position_embeddings must be > 0 (got " +
                                   std::to_string(orig) + ")");
    r.original_max_position_embeddings = orig;
  }
  // factor: required by every type but longrope (HF: "Missing required keys"); yarn's may be null
  // and longrope's absent: then max_position_embeddings / original_max_position_embeddings.
  const bool has_factor = s.contains("factor") && !s["factor"].is_null();
  const double implicit =
      static_cast<double>(ctx.max_position_embeddings) / static_cast<double>(r.original_max_position_embeddings);
  if (!has_factor &&
      !(r.type == RopeScaling::Type::kLongRope || (r.type == RopeScaling::Type::kYarn && s.contains("factor"))))
    throw InputError(source, "rope scaling '" + type + "' needs 'factor'");
  r.factor = rope_number(s, "factor", implicit, type, source);
  if (!(r.factor > 0)) throw InputError(source, "rope scaling factor must be > 0");
  if (r.type == RopeScaling::Type::kLlama3) {
    for (const char* key : {"low_freq_factor", "high_freq_factor"})
      if (!s.contains(key) || s[key].is_null())
        throw InputError(source, "rope scaling 'llama3' needs '" + std::string(key) + "'");
    r.low_freq_factor = rope_number(s, "low_freq_factor", 1.0, type, source);
    r.high_freq_factor = rope_number(s, "high_freq_factor", 4.0, type, source);
    if (r.high_freq_factor == r.low_freq_factor)
      throw InputError(
          source,
          "rope scaling 'llama3': high_freq_factor equals low_freq_factor (the smoothing divides by their difference)");
  }
  if (r.type == RopeScaling::Type::kYarn) {
    // HF: `get("beta_fast") or 32`, `get("beta_slow") or 1`.
    r.beta_fast = rope_number(s, "beta_fast", 0, type, source);
    r.beta_slow = rope_number(s, "beta_slow", 0, type, source);
    if (r.beta_fast < 0 || r.beta_slow < 0)
      throw InputError(source, "rope scaling 'yarn': beta_fast and beta_slow must be > 0");
    if (r.beta_fast == 0) r.beta_fast = 32;
    if (r.beta_slow == 0) r.beta_slow = 1;
    r.mscale = rope_number(s, "mscale", 0, type, source);
    r.mscale_all_dim = rope_number(s, "mscale_all_dim", 0, type, source);
    // HF reads truncate from the outer rope_parameters: with parameters by layer type, its default.
    const auto t = s.find("truncate");
    if (!ctx.layered && t != s.end() && !t->is_null()) {
      if (!t->is_boolean())
        throw InputError(source, "rope scaling 'yarn': 'truncate' must be true or false (got " + short_dump(*t) + ")");
      r.truncate = t->get<bool>();
    }
  }
  if (r.type == RopeScaling::Type::kYarn || r.type == RopeScaling::Type::kLongRope) {
    r.attention_factor = rope_number(s, "attention_factor", 0, type, source);
    if (s.contains("attention_factor") && !s["attention_factor"].is_null() && !(r.attention_factor > 0))
      throw InputError(source, "rope scaling '" + type + "': attention_factor must be > 0");
  }
  if (r.type == RopeScaling::Type::kLongRope) {
    r.short_factor = rope_factor_list(s, "short_factor", type, source);
    r.long_factor = rope_factor_list(s, "long_factor", type, source);
  }
  return r;
}

/// The checks that need the rotary dimension (after validate()).
void check_rope_scaling(const ModelConfig& c, const std::filesystem::path& source) {
  const RopeScaling& r = c.rope_scaling;
  const int64_t half = c.rope_dim() / 2;
  if (r.type == RopeScaling::Type::kLongRope)
    for (const auto* f : {&r.short_factor, &r.long_factor})
      if (static_cast<int64_t>(f->size()) != half)
        throw InputError(source, std::string("rope scaling 'longrope': ") +
                                     (f == &r.short_factor ? "short_factor" : "long_factor") + " has " +
                                     std::to_string(f->size()) + " entries, the rotary dimension " +
                                     std::to_string(c.rope_dim()) + " needs " + std::to_string(half));
  if (r.type == RopeScaling::Type::kDynamic && c.rope_dim() <= 2)
    throw InputError(source,
                     "rope scaling 'dynamic' needs more than 2 rotary channels (its exponent is dim / (dim - 2))");
  if (r.type == RopeScaling::Type::kYarn && c.rope_theta == 1.0)
    throw InputError(source, "rope scaling 'yarn' needs rope_theta != 1 (its correction range divides by ln(theta))");
  const double a = r.attention_scaling();
  if (!(a > 0) || !std::isfinite(a))
    throw InputError(source, "rope scaling: the attention scaling is not a finite number > 0");
}

std::vector<int32_t> ids_of(const json& v) {
  std::vector<int32_t> out;
  if (v.is_number_integer()) out.push_back(v.get<int32_t>());
  if (v.is_array())
    for (const auto& e : v)
      if (e.is_number_integer()) out.push_back(e.get<int32_t>());
  return out;
}

}  // namespace

namespace {

/// Parameter count in 128-bit arithmetic (validate() bounds every dimension below 2^31, so no
/// product of them overflows here).
__int128 parameter_count_wide(const ModelConfig& c) {
  using i128 = __int128;
  const i128 attn = i128(c.hidden_size) * c.head_dim * (2 * i128(c.n_head) + 2 * i128(c.n_head_kv)) +
                    (c.qkv_bias ? i128(c.head_dim) * (i128(c.n_head) + 2 * i128(c.n_head_kv)) : 0);
  const i128 mlp = 3 * i128(c.hidden_size) * c.intermediate_size;
  const i128 per_layer = attn + mlp + 2 * i128(c.hidden_size);
  return i128(c.vocab_size) * c.hidden_size * (c.tie_word_embeddings ? 1 : 2) + i128(c.n_layer) * per_layer +
         c.hidden_size;
}

}  // namespace

double RopeScaling::attention_scaling() const {
  if (type != Type::kYarn && type != Type::kLongRope) return 1.0;
  if (attention_factor > 0) return attention_factor;
  // (a zero denominator gives infinity, which parse_hf_config refuses, rather than dividing by zero)
  const auto ratio = [](double num, double den) { return den != 0 ? num / den : HUGE_VAL; };
  if (type == Type::kYarn) {
    const auto get_mscale = [&](double m) { return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; };
    return mscale != 0 && mscale_all_dim != 0 ? ratio(get_mscale(mscale), get_mscale(mscale_all_dim)) : get_mscale(1.0);
  }
  if (factor <= 1) return 1.0;
  return std::sqrt(1 + ratio(std::log(factor), std::log(static_cast<double>(original_max_position_embeddings))));
}

int64_t ModelConfig::parameter_count() const { return static_cast<int64_t>(parameter_count_wide(*this)); }

void ModelConfig::validate(const std::filesystem::path& source) const {
  auto positive = [&](int64_t v, const char* name) {
    if (v <= 0) throw InputError(source, std::string(name) + " must be > 0 (got " + std::to_string(v) + ")");
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(n_layer, "num_hidden_layers");
  positive(n_head, "num_attention_heads");
  positive(n_head_kv, "num_key_value_heads");
  positive(head_dim, "head_dim");
  // Token ids are int32, and no real model comes near 2^31 in any dimension; larger values would
  // overflow the size arithmetic downstream.
  auto bounded = [&](int64_t v, const char* name) {
    if (v > std::numeric_limits<int32_t>::max())
      throw InputError(source, std::string(name) + " must be < 2^31 (got " + std::to_string(v) + ")");
  };
  bounded(vocab_size, "vocab_size");
  bounded(hidden_size, "hidden_size");
  bounded(intermediate_size, "intermediate_size");
  bounded(n_layer, "num_hidden_layers");
  bounded(n_head, "num_attention_heads");
  bounded(n_head_kv, "num_key_value_heads");
  bounded(head_dim, "head_dim");
  if (parameter_count_wide(*this) > std::numeric_limits<int64_t>::max() / 8)
    throw InputError(source, "the shapes imply more than 2^60 parameters");
  if (n_head % n_head_kv != 0)
    throw InputError(source, "num_attention_heads (" + std::to_string(n_head) +
                                 ") is not a multiple of num_key_value_heads (" + std::to_string(n_head_kv) + ")");
  if (rotary_dim < 0 || rotary_dim > head_dim || rotary_dim % 2 != 0)
    throw InputError(source, "the rotary dimension (" + std::to_string(rotary_dim) +
                                 " = head_dim x partial_rotary_factor) must be even and <= head_dim");
  if (head_dim % 2 != 0)
    throw InputError(source, "head_dim must be even for RoPE (got " + std::to_string(head_dim) + ")");
  auto finite_positive = [&](double v, const char* name) {
    if (v > 0 && std::isfinite(v)) return;
    char got[32];
    std::snprintf(got, sizeof got, "%g", v);
    throw InputError(source, std::string(name) + " must be a finite number > 0 (got " + got + ")");
  };
  finite_positive(rope_theta, "rope_theta");
  // A zero or negative epsilon divides by zero in RMSNorm (NaN logits, an empty output, exit 0).
  finite_positive(rms_norm_eps, "rms_norm_eps");
  if (max_position_embeddings <= 0)
    throw InputError(source,
                     "max_position_embeddings must be > 0 (got " + std::to_string(max_position_embeddings) + ")");
}

std::string ModelConfig::unfused_features() const {
  std::string out;
  auto add = [&](bool on, const char* what) {
    if (on) out += (out.empty() ? "" : ", ") + std::string(what);
  };
  // The decode attention kernels are built for these head sizes (kernels/decode.h).
  add(head_dim != 64 && head_dim != 96 && head_dim != 128 && head_dim != 256,
      ("head_dim " + std::to_string(head_dim)).c_str());
  add(rope_dim() % 2 != 0, "odd rotary_dim");
  // The sandwich norm's kernel holds a row in one block (kernels/norm.h: kRmsNormResidualMaxHidden).
  add(sandwich_norms && hidden_size > 8192, "sandwich norms over a hidden size above 8,192");
  return out;
}

ModelConfig parse_hf_config_json(const json& j, const std::filesystem::path& source) {
  try {
    return parse_hf_config_fields(j, source);
  } catch (const json::exception& e) {  // a field of the wrong type, e.g. "rms_norm_eps": "tiny"
    throw InputError(source, std::string("malformed config: ") + e.what());
  }
}

namespace {

constexpr const char* kFamilies = "llama, mistral, qwen2, qwen3, gemma2, gemma3_text, gemma3, phi3";

bool is_gemma(const std::string& t) { return t == "gemma2" || t == "gemma3_text"; }

/// A number field that may be null (e.g. Gemma 3's attn_logit_softcapping): `fallback` then.
double number_or(const json& j, const char* key, double fallback) {
  const auto it = j.find(key);
  return it == j.end() || !it->is_number() ? fallback : it->get<double>();
}

/// Per-layer structure: sliding windows from layer_types (or the family's fixed pattern) and, for
/// Gemma 3, per-layer-type RoPE bases.
void parse_layers(const json& j, ModelConfig& c, const std::filesystem::path& source) {
  std::vector<std::string> types;
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    for (const auto& t : j["layer_types"]) {
      if (!t.is_string()) throw InputError(source, "layer_types must hold strings");
      const std::string v = t.get<std::string>();
      if (v != "full_attention" && v != "sliding_attention")
        throw InputError(source, "unsupported layer type '" + v + "' (supported: full_attention, sliding_attention)");
      types.push_back(v);
    }
    if (static_cast<int64_t>(types.size()) != c.n_layer)
      throw InputError(source, "layer_types has " + std::to_string(types.size()) + " entries for " +
                                   std::to_string(c.n_layer) + " layers");
  } else if (c.n_layer > (int64_t{1} << 16) && (c.model_type == "gemma2" || c.model_type == "gemma3_text" ||
                                                (c.model_type == "mistral" && c.sliding_window > 0))) {
    // The family's fixed pattern would be one entry per layer: no real model comes near.
    throw InputError(source, "num_hidden_layers " + std::to_string(c.n_layer) +
                                 " is too many layers for a per-layer sliding-window pattern (at most 65536)");
  } else if (c.model_type == "gemma2") {  // older configs: every other layer slides, starting with layer 0
    for (int64_t l = 0; l < c.n_layer; ++l) types.push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
  } else if (c.model_type == "gemma3_text") {  // older configs: 5 local layers, then a global one
    const int64_t pattern =
        int_or(j, "sliding_window_pattern", int_or(j, "_sliding_window_pattern", 6, source), source);
    for (int64_t l = 0; l < c.n_layer; ++l)
      types.push_back((l + 1) % std::max<int64_t>(pattern, 1) != 0 ? "sliding_attention" : "full_attention");
  } else if (c.model_type == "mistral" && c.sliding_window > 0) {
    types.assign(static_cast<std::size_t>(c.n_layer), "sliding_attention");
  }
  const bool any_sliding = std::find(types.begin(), types.end(), "sliding_attention") != types.end();
  if (any_sliding && c.sliding_window <= 0)
    throw InputError(source, "layer_types has sliding_attention layers but sliding_window is missing");
  c.layer_window.assign(static_cast<std::size_t>(c.n_layer), 0);
  for (std::size_t l = 0; l < types.size(); ++l)
    if (types[l] == "sliding_attention") c.layer_window[l] = c.sliding_window;
  if (!any_sliding) c.layer_window.clear();
  // Gemma 3: local (sliding) layers use their own RoPE base without scaling.
  if (c.model_type == "gemma3_text") {
    double local = number_or(j, "rope_local_base_freq", 10000.0);
    const json params = j.value("rope_parameters", json());
    if (params.is_object() && params.contains("sliding_attention") && params["sliding_attention"].is_object())
      local = params["sliding_attention"].value("rope_theta", local);
    c.layer_rope_theta.assign(static_cast<std::size_t>(c.n_layer), c.rope_theta);
    for (int64_t l = 0; l < c.n_layer; ++l)
      if (c.window(l) > 0) c.layer_rope_theta[static_cast<std::size_t>(l)] = local;
  }
}

ModelConfig parse_hf_config_fields(const json& top, const std::filesystem::path& source) {
  if (!top.is_object()) throw InputError(source, "expected a JSON object");
  // Gemma 3 multimodal checkpoints hold the language model's config in text_config.
  const bool multimodal = top.value("model_type", std::string()) == "gemma3";
  if (multimodal && !(top.contains("text_config") && top["text_config"].is_object()))
    throw InputError(source, "model_type gemma3 without a text_config object");
  const json& j = multimodal ? top["text_config"] : top;
  ModelConfig c;
  c.model_type = multimodal ? std::string("gemma3_text") : j.value("model_type", std::string());
  if (c.model_type != "llama" && c.model_type != "mistral" && c.model_type != "qwen2" && c.model_type != "qwen3" &&
      !is_gemma(c.model_type) && c.model_type != "phi3")
    throw InputError(source, "unknown model_type '" + c.model_type + "' (supported: " + kFamilies + ")");
  c.vocab_size = require_int(j, "vocab_size", source);
  c.hidden_size = require_int(j, "hidden_size", source);
  c.intermediate_size = require_int(j, "intermediate_size", source);
  c.n_layer = require_int(j, "num_hidden_layers", source);
  c.n_head = require_int(j, "num_attention_heads", source);
  c.n_head_kv = j.contains("num_key_value_heads") && j["num_key_value_heads"].is_number_integer()
                    ? j["num_key_value_heads"].get<int64_t>()
                    : c.n_head;
  c.head_dim = j.contains("head_dim") && j["head_dim"].is_number_integer()
                   ? j["head_dim"].get<int64_t>()
                   : (c.n_head > 0 ? c.hidden_size / c.n_head : 0);
  c.rms_norm_eps = j.value("rms_norm_eps", 1e-6);
  c.max_position_embeddings = int_or(j, "max_position_embeddings", 4096, source);
  c.tie_word_embeddings = j.value("tie_word_embeddings", false);
  c.qkv_bias = c.model_type == "qwen2" || j.value("attention_bias", false);
  if (j.contains("sliding_window") && j["sliding_window"].is_number_integer())
    c.sliding_window = j["sliding_window"].get<int64_t>();
  // Qwen2/3 set sliding_window but use it only with use_sliding_window (and layer_types says so).
  if ((c.model_type == "qwen2" || c.model_type == "qwen3") && !j.value("use_sliding_window", false) &&
      !j.contains("layer_types"))
    c.sliding_window = 0;
  // RoPE: transformers < 5 writes rope_theta + rope_scaling; >= 5 writes rope_parameters, for Gemma 3
  // keyed by layer type (the full-attention entry is the model's; sliding layers: parse_layers). As
  // in HF, a non-empty rope_scaling wins, and the parameters' own rope_theta over the top-level one.
  RopeContext rope_ctx{c.model_type, c.max_position_embeddings, &j, false};
  json params = j.value("rope_scaling", json());
  if (!params.is_null() && !params.is_object())
    throw InputError(source, "rope_scaling must be an object (got " + std::string(params.type_name()) + ")");
  if (params.is_null() || params.empty()) {
    params = j.value("rope_parameters", json());
    if (params.is_object() && params.contains("full_attention") && params["full_attention"].is_object()) {
      params = params["full_attention"];
      rope_ctx.layered = true;
    }
  }
  c.rope_theta =
      params.is_object() ? params.value("rope_theta", j.value("rope_theta", 10000.0)) : j.value("rope_theta", 10000.0);
  c.rope_scaling = parse_rope_scaling(params, rope_ctx, source);
  // Family features beyond Llama.
  const double partial = params.is_object()
                             ? params.value("partial_rotary_factor", number_or(j, "partial_rotary_factor", 1.0))
                             : number_or(j, "partial_rotary_factor", 1.0);
  if (!(partial > 0 && partial <= 1)) throw InputError(source, "partial_rotary_factor must be in (0, 1]");
  if (partial < 1) c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * partial);
  c.qk_norm = c.model_type == "qwen3" || c.model_type == "gemma3_text";
  if (is_gemma(c.model_type)) {
    c.sandwich_norms = true;
    c.norm_plus_one = true;
    c.embed_scale = std::sqrt(static_cast<double>(c.hidden_size));
    const std::string act = j.value("hidden_activation", j.value("hidden_act", std::string("gelu_pytorch_tanh")));
    if (act != "gelu_pytorch_tanh" && act != "gelu")
      throw InputError(source, "unsupported hidden_activation '" + act + "' (supported: gelu_pytorch_tanh)");
    c.activation = GatedActivation::kGeluTanh;
    c.attn_scale = 1.0 / std::sqrt(number_or(j, "query_pre_attn_scalar", static_cast<double>(c.head_dim)));
    c.attn_softcap = number_or(j, "attn_logit_softcapping", 0.0);
    c.final_softcap = number_or(j, "final_logit_softcapping", 0.0);
  } else {
    const std::string act = j.value("hidden_act", std::string("silu"));
    if (act != "silu") throw InputError(source, "unsupported hidden_act '" + act + "' (supported: silu)");
  }
  // (per-layer structure after validate(): num_hidden_layers is bounded then)
  if (j.contains("bos_token_id")) {
    auto b = ids_of(j["bos_token_id"]);
    if (!b.empty()) c.bos_token_id = b.front();
  }
  if (j.contains("eos_token_id")) c.eos_token_ids = ids_of(j["eos_token_id"]);
  c.weights_dtype = j.value("torch_dtype", j.value("dtype", std::string("float32")));
  c.validate(source);
  check_rope_scaling(c, source);
  parse_layers(j, c, source);
  return c;
}

}  // namespace

ModelConfig parse_hf_config(const std::filesystem::path& config_json) {
  ModelConfig c = parse_hf_config_json(read_json_file(config_json), config_json);
  const auto gen = config_json.parent_path() / "generation_config.json";
  if (std::filesystem::exists(gen)) {
    const json g = read_json_file(gen);
    if (g.contains("eos_token_id"))
      for (int32_t id : ids_of(g["eos_token_id"]))
        if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end())
          c.eos_token_ids.push_back(id);
    if (c.bos_token_id < 0 && g.contains("bos_token_id")) {
      auto b = ids_of(g["bos_token_id"]);
      if (!b.empty()) c.bos_token_id = b.front();
    }
  }
  return c;
}

}  // namespace kvscope
