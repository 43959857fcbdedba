#include <ATen/ATen.h>

#include "kvscope/core/errors.h"
#include "kvscope/core/model.h"

namespace kvscope {

int64_t ModelWeights::bytes() const {
  auto b = [](const at::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.numel() * t.element_size()) : 0; };
  int64_t total = b(embed) + b(final_norm);
  if (!lm_head.is_same(embed)) total += b(lm_head);
  for (const auto& l : layers)
    total += b(l.attn_norm) + b(l.w_qkv) + b(l.b_qkv) + b(l.w_o) + b(l.mlp_norm) + b(l.w_gate_up) + b(l.w_down);
  return total;
}

c10::ScalarType parse_dtype(const std::string& name) {
  if (name == "fp32" || name == "float32" || name == "float") return c10::kFloat;
  if (name == "bf16" || name == "bfloat16") return c10::kBFloat16;
  if (name == "fp16" || name == "float16" || name == "half") return c10::kHalf;
  throw InputError("unknown dtype '" + name + "' (expected fp32, bf16 or fp16)");
}

std::string dtype_name(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat:
      return "fp32";
    case c10::kBFloat16:
      return "bf16";
    case c10::kHalf:
      return "fp16";
    default:
      return c10::toString(dtype);
  }
}

Model load_model(const std::filesystem::path& path, const LoadOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);  // a symlink loop is an error, not an exception
  if (ec && ec != std::errc::no_such_file_or_directory) throw InputError(path, "cannot be opened: " + ec.message());
  if (!fs::exists(st)) throw InputError(path, "no such file or directory");
  if (fs::is_directory(st)) {
    if (fs::exists(path / "config.json")) return load_hf_model(path, options);
    std::vector<fs::path> bins;
    for (const auto& e : fs::directory_iterator(path)) {
      const auto name = e.path().filename().string();
      if (e.path().extension() == ".bin" && name.rfind("tok", 0) != 0) bins.push_back(e.path());
    }
    if (bins.size() == 1) return load_llama2c_model(bins[0], options);
    throw InputError(path, bins.empty() ? "no config.json (Hugging Face) and no llama2.c .bin checkpoint"
                                        : "several llama2.c .bin checkpoints: name one");
  }
  if (path.filename() == "config.json") return load_hf_model(path.parent_path(), options);
  if (path.extension() == ".bin") return load_llama2c_model(path, options);
  throw InputError(path, "not a model: expected a Hugging Face directory or a llama2.c .bin file");
}

}  // namespace kvscope
