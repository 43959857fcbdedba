#include "kvscope/core/model_config.h"

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

RopeScaling parse_rope_scaling(const json& s, const std::filesystem::path& source) {
  RopeScaling r;
  if (s.is_null()) return r;
  std::string type = s.value("rope_type", s.value("type", std::string("default")));
  if (type == "default") return r;
  r.factor = s.value("factor", 1.0);
  if (type == "linear") {
    r.type = RopeScaling::Type::kLinear;
  } else if (type == "llama3") {
    r.type = RopeScaling::Type::kLlama3;
    r.low_freq_factor = s.value("low_freq_factor", 1.0);
    r.high_freq_factor = s.value("high_freq_factor", 4.0);
    r.original_max_position_embeddings = int_or(s, "original_max_position_embeddings", 8192, source);
  } else {
    throw InputError(source, "unsupported rope scaling type '" + type + "' (supported: default, linear, llama3)");
  }
  if (r.factor <= 0) throw InputError(source, "rope scaling factor must be > 0");
  return r;
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

ModelConfig parse_hf_config_json(const json& j, const std::filesystem::path& source) {
  try {
    return parse_hf_config_fields(j, source);
  } catch (const json::exception& e) {  // a field of the wrong type, e.g. "rms_norm_eps": "tiny"
    throw InputError(source, std::string("malformed config: ") + e.what());
  }
}

namespace {

ModelConfig parse_hf_config_fields(const json& j, const std::filesystem::path& source) {
  if (!j.is_object()) throw InputError(source, "expected a JSON object");
  ModelConfig c;
  c.model_type = j.value("model_type", std::string());
  if (c.model_type != "llama" && c.model_type != "mistral" && c.model_type != "qwen2")
    throw InputError(source, "unknown model_type '" + c.model_type + "' (supported: llama, mistral, qwen2)");
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
  // RoPE: transformers < 5 writes rope_theta + rope_scaling; >= 5 writes rope_parameters.
  const json params = j.value("rope_parameters", json());
  if (params.is_object()) {
    c.rope_theta = params.value("rope_theta", j.value("rope_theta", 10000.0));
    c.rope_scaling = parse_rope_scaling(params, source);
  } else {
    c.rope_theta = j.value("rope_theta", 10000.0);
    c.rope_scaling = parse_rope_scaling(j.value("rope_scaling", json()), source);
  }
  if (j.contains("bos_token_id")) {
    auto b = ids_of(j["bos_token_id"]);
    if (!b.empty()) c.bos_token_id = b.front();
  }
  if (j.contains("eos_token_id")) c.eos_token_ids = ids_of(j["eos_token_id"]);
  c.weights_dtype = j.value("torch_dtype", j.value("dtype", std::string("float32")));
  c.validate(source);
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
