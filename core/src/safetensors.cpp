#include "kvscope/core/safetensors.h"

#include <cstring>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "kvscope/core/errors.h"
#include "mapped_file.h"
#include "text_file.h"

namespace kvscope {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

/// ATen dtype of a safetensors dtype string (one parse_safetensors_header accepted).
at::ScalarType scalar_type_of(const std::string& d) {
  if (d == "F32") return at::kFloat;
  if (d == "F16") return at::kHalf;
  if (d == "BF16") return at::kBFloat16;
  if (d == "F64") return at::kDouble;
  if (d == "I64") return at::kLong;
  if (d == "I32") return at::kInt;
  if (d == "I16") return at::kShort;
  if (d == "I8") return at::kChar;
  if (d == "U8") return at::kByte;
  return at::kBool;  // "BOOL"
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path) {
  map_ = std::make_shared<MappedFile>(path);
  SafetensorsHeader header = parse_safetensors_header({map_->data(), map_->size()}, path);
  data_ = map_->data() + header.data_offset;
  entries_ = std::move(header.entries);
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw InputError(path_, "tensor '" + name + "' not found");
  const auto& e = it->second;
  const at::ScalarType st = scalar_type_of(e.dtype);
  auto keep = map_;
  void* ptr = const_cast<uint8_t*>(data_ + e.begin);
  const auto options = at::TensorOptions().dtype(st);
  if (reinterpret_cast<uintptr_t>(ptr) % safetensors_dtype_size(e.dtype) != 0) {
    // Offsets inside the data section are aligned (parse_safetensors_header), but a header length
    // that is not a multiple of 8 shifts the whole section: reading a float from it is undefined.
    at::Tensor copy = at::empty(e.shape, options);
    if (e.end > e.begin) std::memcpy(copy.data_ptr(), ptr, e.end - e.begin);
    return copy;
  }
  // The mapping is PROT_READ: views must never be written; callers convert/copy before use.
  return at::from_blob(
      ptr, e.shape, [keep](void*) {}, options);
}

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::filesystem::path& dir) : dir_(dir) {
  const auto index = dir / "model.safetensors.index.json";
  const auto single = dir / "model.safetensors";
  if (std::filesystem::exists(index)) {
    source_ = index;
    std::map<std::string, size_t> shard_of_file;
    for (const auto& [name, f] : parse_safetensors_index(read_text_file(index), index)) {
      auto [it, fresh] = shard_of_file.emplace(f, shards_.size());
      if (fresh) shards_.push_back(std::make_unique<SafetensorsFile>(dir / f));
      if (!shards_[it->second]->contains(name))
        throw InputError(dir / f,
                         "tensor '" + name + "' listed in " + index.filename().string() + " is not in this shard");
      where_[name] = it->second;
    }
  } else if (std::filesystem::exists(single)) {
    source_ = single;
    shards_.push_back(std::make_unique<SafetensorsFile>(single));
    for (const auto& [name, e] : shards_[0]->entries()) where_[name] = 0;
  } else {
    throw InputError(dir, "no model.safetensors or model.safetensors.index.json");
  }
}

bool SafetensorsCheckpoint::contains(const std::string& name) const { return where_.count(name) != 0; }

at::Tensor SafetensorsCheckpoint::tensor(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw InputError(dir_, "tensor '" + name + "' not found in the checkpoint");
  return shards_[it->second]->tensor(name);
}

at::Tensor SafetensorsCheckpoint::tensor(const std::string& name, const std::vector<int64_t>& expected) const {
  at::Tensor t = tensor(name);
  if (t.sizes().vec() != expected)
    throw InputError(shards_[where_.at(name)]->path(), "tensor '" + name + "' has shape " + shape_str(t.sizes().vec()) +
                                                           ", config.json implies " + shape_str(expected));
  return t;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [n, i] : where_) out.push_back(n);
  return out;
}

}  // namespace kvscope
