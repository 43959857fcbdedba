// Hugging Face checkpoints of the Llama family and relatives (Llama, Mistral, Qwen2/3, Gemma 2/3,
// Phi-3): config.json + safetensors (+ tokenizer when present).
#include <algorithm>
#include <set>
#include <string>

#include <ATen/ATen.h>

#include "json_file.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/model.h"
#include "kvscope/core/safetensors.h"

namespace kvscope {
namespace {

at::Tensor to_target(const at::Tensor& t, const LoadOptions& o) { return t.to(o.device, o.dtype).contiguous(); }

/// A norm weight as the engine applies it: Gemma's RMSNorm scales by (1 + w), folded in here and
/// kept in fp32 (rms_norm then scales before casting, as HF's Gemma RMSNorm does).
at::Tensor norm_weight(const SafetensorsCheckpoint& ckpt, const std::string& name, int64_t n, const ModelConfig& c,
                       const LoadOptions& o) {
  at::Tensor w = ckpt.tensor(name, {n});
  if (c.norm_plus_one) return (w.to(at::kFloat) + 1.0).to(o.device).contiguous();  // fp32: see rms_norm
  return to_target(w, o);
}

LayerWeights load_layer(const SafetensorsCheckpoint& ckpt, const ModelConfig& c, int64_t i, const LoadOptions& o) {
  const std::string p = "model.layers." + std::to_string(i) + ".";
  const int64_t q_rows = c.n_head * c.head_dim, kv_rows = c.n_head_kv * c.head_dim;
  const bool gemma = c.sandwich_norms;
  LayerWeights l;
  l.attn_norm = norm_weight(ckpt, p + "input_layernorm.weight", c.hidden_size, c, o);
  if (c.model_type == "phi3") {  // fused q, k, v rows (same order as ours)
    l.w_qkv = to_target(ckpt.tensor(p + "self_attn.qkv_proj.weight", {q_rows + 2 * kv_rows, c.hidden_size}), o);
  } else {
    l.w_qkv = at::cat({to_target(ckpt.tensor(p + "self_attn.q_proj.weight", {q_rows, c.hidden_size}), o),
                       to_target(ckpt.tensor(p + "self_attn.k_proj.weight", {kv_rows, c.hidden_size}), o),
                       to_target(ckpt.tensor(p + "self_attn.v_proj.weight", {kv_rows, c.hidden_size}), o)});
  }
  if (c.qkv_bias)
    l.b_qkv = at::cat({to_target(ckpt.tensor(p + "self_attn.q_proj.bias", {q_rows}), o),
                       to_target(ckpt.tensor(p + "self_attn.k_proj.bias", {kv_rows}), o),
                       to_target(ckpt.tensor(p + "self_attn.v_proj.bias", {kv_rows}), o)});
  if (c.qk_norm) {
    l.q_norm = norm_weight(ckpt, p + "self_attn.q_norm.weight", c.head_dim, c, o);
    l.k_norm = norm_weight(ckpt, p + "self_attn.k_norm.weight", c.head_dim, c, o);
  }
  l.w_o = to_target(ckpt.tensor(p + "self_attn.o_proj.weight", {c.hidden_size, q_rows}), o);
  if (gemma) {
    l.post_attn_norm = norm_weight(ckpt, p + "post_attention_layernorm.weight", c.hidden_size, c, o);
    l.mlp_norm = norm_weight(ckpt, p + "pre_feedforward_layernorm.weight", c.hidden_size, c, o);
    l.post_ffn_norm = norm_weight(ckpt, p + "post_feedforward_layernorm.weight", c.hidden_size, c, o);
  } else {
    l.mlp_norm = norm_weight(ckpt, p + "post_attention_layernorm.weight", c.hidden_size, c, o);
  }
  if (c.model_type == "phi3") {  // fused gate then up rows (Phi3MLP chunks gate first)
    l.w_gate_up = to_target(ckpt.tensor(p + "mlp.gate_up_proj.weight", {2 * c.intermediate_size, c.hidden_size}), o);
  } else {
    l.w_gate_up = at::cat({to_target(ckpt.tensor(p + "mlp.gate_proj.weight", {c.intermediate_size, c.hidden_size}), o),
                           to_target(ckpt.tensor(p + "mlp.up_proj.weight", {c.intermediate_size, c.hidden_size}), o)});
  }
  l.w_down = to_target(ckpt.tensor(p + "mlp.down_proj.weight", {c.hidden_size, c.intermediate_size}), o);
  return l;
}

std::vector<int32_t> stop_ids(const ModelConfig& c) { return c.eos_token_ids; }

/// "0-7", "0-3, 5, 9-11": a set of layer indices as ranges.
std::string ranges_str(const std::set<int64_t>& s) {
  std::string out;
  for (auto it = s.begin(); it != s.end();) {
    const int64_t first = *it;
    int64_t last = first;
    while (++it != s.end() && *it == last + 1) ++last;
    out += (out.empty() ? "" : ", ") + std::to_string(first) + (last > first ? "-" + std::to_string(last) : "");
  }
  return out;
}

/// num_hidden_layers must match the layers the checkpoint holds weights for ("model.layers.<i>."):
/// a layer without weights would fail later naming only one tensor, and weights for layers past
/// the count would be silently unused (transformers only warns), giving a truncated model's output.
void check_layer_count(const SafetensorsCheckpoint& ckpt, const ModelConfig& c, const std::filesystem::path& config) {
  static const std::string prefix = "model.layers.";
  std::set<int64_t> held;
  for (const auto& name : ckpt.names()) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const size_t dot = name.find('.', prefix.size());
    const std::string index = name.substr(prefix.size(), dot == std::string::npos ? dot : dot - prefix.size());
    if (index.empty() || index.size() > 9 ||
        !std::all_of(index.begin(), index.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      continue;
    held.insert(std::stoll(index));
  }
  const std::string has = ckpt.source().string() + " holds weights for " + std::to_string(held.size()) + " layer" +
                          (held.size() == 1 ? "" : "s") + (held.empty() ? "" : " (" + ranges_str(held) + ")");
  // The layers below n_layer without weights, as ranges (n_layer may be huge: walk the gaps).
  std::string missing;
  int64_t next = 0, n_missing = 0;
  auto gap = [&](int64_t end) {  // layers [next, end) are missing
    if (end <= next) return;
    missing +=
        (missing.empty() ? "" : ", ") + std::to_string(next) + (end - 1 > next ? "-" + std::to_string(end - 1) : "");
    n_missing += end - next;
  };
  std::set<int64_t> extra;
  for (int64_t i : held) {
    if (i >= c.n_layer) {
      extra.insert(i);
      continue;
    }
    gap(i);
    next = i + 1;
  }
  gap(c.n_layer);
  const std::string head = "num_hidden_layers is " + std::to_string(c.n_layer) + " but " + has;
  if (n_missing > 0)
    throw InputError(config, head + ": no weights for layer" + (n_missing == 1 ? " " : "s ") + missing);
  if (!extra.empty())
    throw InputError(config, head + ": layer" + (extra.size() == 1 ? " " : "s ") + ranges_str(extra) +
                                 " would be unused (to run fewer layers, write a checkpoint without them)");
}

/// Whether the checkpoint's tokenizer adds BOS by itself: tokenizer_config.json `add_bos_token`,
/// else a TemplateProcessing post-processor that starts with a special token (Llama 3).
bool tokenizer_adds_bos(const std::filesystem::path& dir) {
  const auto cfg = dir / "tokenizer_config.json";
  if (std::filesystem::exists(cfg)) {
    const auto j = read_json_file(cfg);
    if (j.contains("add_bos_token") && j["add_bos_token"].is_boolean()) return j["add_bos_token"].get<bool>();
  }
  const auto tj = dir / "tokenizer.json";
  if (!std::filesystem::exists(tj)) return false;
  const auto j = read_json_file(tj);
  const auto pp = j.value("post_processor", nlohmann::json());
  auto starts_with_special = [](const nlohmann::json& p) {
    return p.is_object() && p.value("type", "") == "TemplateProcessing" && p.contains("single") &&
           p["single"].is_array() && !p["single"].empty() && p["single"][0].contains("SpecialToken");
  };
  if (starts_with_special(pp)) return true;
  if (pp.is_object() && pp.value("type", "") == "Sequence" && pp.contains("processors"))
    for (const auto& p : pp["processors"])
      if (starts_with_special(p)) return true;
  return false;
}

}  // namespace

Model load_hf_model(const std::filesystem::path& dir, const LoadOptions& options) {
  Model m;
  m.source = dir;
  m.device = options.device;
  m.dtype = options.dtype;
  m.config = parse_hf_config(dir / "config.json");
  const ModelConfig& c = m.config;
  SafetensorsCheckpoint ckpt(dir);
  check_layer_count(ckpt, c, dir / "config.json");
  m.weights.embed = to_target(ckpt.tensor("model.embed_tokens.weight", {c.vocab_size, c.hidden_size}), options);
  m.weights.final_norm = norm_weight(ckpt, "model.norm.weight", c.hidden_size, c, options);
  if (c.tie_word_embeddings || !ckpt.contains("lm_head.weight")) {
    if (!c.tie_word_embeddings)
      throw InputError(dir, "lm_head.weight is missing and config.json does not set tie_word_embeddings");
    m.weights.lm_head = m.weights.embed;
  } else {
    m.weights.lm_head = to_target(ckpt.tensor("lm_head.weight", {c.vocab_size, c.hidden_size}), options);
  }
  for (int64_t i = 0; i < c.n_layer; ++i) m.weights.layers.push_back(load_layer(ckpt, c, i, options));
  // A checkpoint without any tokenizer file runs on token ids (--prompt-ids); a broken one fails.
  const bool has_tokenizer =
      std::filesystem::exists(dir / "tokenizer.json") || std::filesystem::exists(dir / "tokenizer.model") ||
      std::any_of(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator(), [](const auto& e) {
        return e.path().filename().string().rfind("tok", 0) == 0 && e.path().extension() == ".bin";
      });
  if (!options.tokenizer.empty() || has_tokenizer)
    m.tokenizer = load_tokenizer(options.tokenizer.empty() ? dir : options.tokenizer);
  m.stop_token_ids = stop_ids(c);
  m.add_bos = tokenizer_adds_bos(dir);
  return m;
}

Model random_init_model(const std::filesystem::path& config_json, const LoadOptions& o, uint64_t seed) {
  Model m;
  m.source = config_json;
  m.device = o.device;
  m.dtype = o.dtype;
  m.config = parse_hf_config(config_json);
  const ModelConfig& c = m.config;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto opts = at::TensorOptions().device(o.device).dtype(o.dtype);
  if (o.device.is_cuda()) at::manual_seed(seed);  // device generators are seeded globally
  auto randn = [&](std::vector<int64_t> shape) {
    return o.device.is_cuda() ? at::randn(shape, opts).mul_(0.02) : at::randn(shape, gen, opts).mul_(0.02);
  };
  auto ones = [&](int64_t n) { return at::ones({n}, opts); };
  const int64_t qkv_rows = (c.n_head + 2 * c.n_head_kv) * c.head_dim;
  m.weights.embed = randn({c.vocab_size, c.hidden_size});
  m.weights.final_norm = ones(c.hidden_size);
  m.weights.lm_head = c.tie_word_embeddings ? m.weights.embed : randn({c.vocab_size, c.hidden_size});
  for (int64_t i = 0; i < c.n_layer; ++i) {
    LayerWeights l;
    l.attn_norm = ones(c.hidden_size);
    l.w_qkv = randn({qkv_rows, c.hidden_size});
    if (c.qkv_bias) l.b_qkv = randn({qkv_rows});
    l.w_o = randn({c.hidden_size, c.n_head * c.head_dim});
    l.mlp_norm = ones(c.hidden_size);
    l.w_gate_up = randn({2 * c.intermediate_size, c.hidden_size});
    l.w_down = randn({c.hidden_size, c.intermediate_size});
    if (c.qk_norm) l.q_norm = ones(c.head_dim), l.k_norm = ones(c.head_dim);
    if (c.sandwich_norms) l.post_attn_norm = ones(c.hidden_size), l.post_ffn_norm = ones(c.hidden_size);
    m.weights.layers.push_back(std::move(l));
  }
  m.stop_token_ids = stop_ids(c);
  return m;
}

}  // namespace kvscope
