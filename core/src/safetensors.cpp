#include "kvscope/core/safetensors.h"

#include <cstring>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "json_file.h"
#include "kvscope/core/errors.h"
#include "mapped_file.h"

namespace kvscope {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

/// Bytes per element and ATen dtype of a safetensors dtype string; itemsize 0 if unsupported.
std::pair<size_t, at::ScalarType> dtype_of(const std::string& d) {
  if (d == "F32") return {4, at::kFloat};
  if (d == "F16") return {2, at::kHalf};
  if (d == "BF16") return {2, at::kBFloat16};
  if (d == "F64") return {8, at::kDouble};
  if (d == "I64") return {8, at::kLong};
  if (d == "I32") return {4, at::kInt};
  if (d == "I16") return {2, at::kShort};
  if (d == "I8") return {1, at::kChar};
  if (d == "U8") return {1, at::kByte};
  if (d == "BOOL") return {1, at::kBool};
  return {0, at::kFloat};
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path) {
  map_ = std::make_shared<MappedFile>(path);
  const size_t size = map_->size();
  if (size < 8) throw InputError(path, "truncated safetensors: " + std::to_string(size) + " bytes, no header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, map_->data(), 8);  // little-endian u64 (x86-64 / aarch64 hosts)
  if (header_len > size - 8)
    throw InputError(path, "truncated safetensors: header length " + std::to_string(header_len) +
                               " exceeds the file size " + std::to_string(size));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(map_->data()) + 8,
                                   reinterpret_cast<const char*>(map_->data()) + 8 + header_len);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(path, std::string("safetensors header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) throw InputError(path, "safetensors header is not a JSON object");
  data_ = map_->data() + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    SafetensorsEntry entry;
    try {
      entry.dtype = e.at("dtype").get<std::string>();
      entry.shape = e.at("shape").get<std::vector<int64_t>>();
      const auto off = e.at("data_offsets").get<std::vector<uint64_t>>();
      if (off.size() != 2) throw InputError(path, "tensor '" + name + "': data_offsets must have 2 entries");
      entry.begin = off[0];
      entry.end = off[1];
    } catch (const nlohmann::json::exception& ex) {
      throw InputError(path, "tensor '" + name + "': malformed header entry (" + ex.what() + ")");
    }
    const auto [itemsize, st] = dtype_of(entry.dtype);
    if (itemsize == 0) throw InputError(path, "tensor '" + name + "': unsupported dtype " + entry.dtype);
    uint64_t numel = 1;
    for (int64_t d : entry.shape) {
      if (d < 0) throw InputError(path, "tensor '" + name + "': negative dimension in shape " + shape_str(entry.shape));
      numel *= static_cast<uint64_t>(d);
    }
    if (entry.end < entry.begin || entry.end - entry.begin != numel * itemsize)
      throw InputError(path, "tensor '" + name + "': byte range " + std::to_string(entry.end - entry.begin) +
                                 " does not match shape " + shape_str(entry.shape) + " x " + entry.dtype);
    if (entry.end > data_size)
      throw InputError(path, "truncated safetensors: tensor '" + name + "' ends at byte " + std::to_string(entry.end) +
                                 " of a " + std::to_string(data_size) + "-byte data section");
    entries_.emplace(name, std::move(entry));
  }
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw InputError(path_, "tensor '" + name + "' not found");
  const auto& e = it->second;
  const auto [itemsize, st] = dtype_of(e.dtype);
  auto keep = map_;
  void* ptr = const_cast<uint8_t*>(data_ + e.begin);
  // The mapping is PROT_READ: views must never be written; callers convert/copy before use.
  return at::from_blob(ptr, e.shape, [keep](void*) {}, at::TensorOptions().dtype(st));
}

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::filesystem::path& dir) : dir_(dir) {
  const auto index = dir / "model.safetensors.index.json";
  const auto single = dir / "model.safetensors";
  if (std::filesystem::exists(index)) {
    const auto j = read_json_file(index);
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      throw InputError(index, "missing 'weight_map' object");
    std::map<std::string, size_t> shard_of_file;
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string()) throw InputError(index, "weight_map['" + name + "'] is not a file name");
      const std::string f = file.get<std::string>();
      auto [it, fresh] = shard_of_file.emplace(f, shards_.size());
      if (fresh) shards_.push_back(std::make_unique<SafetensorsFile>(dir / f));
      if (!shards_[it->second]->contains(name))
        throw InputError(dir / f, "tensor '" + name + "' listed in " + index.filename().string() + " is not in this shard");
      where_[name] = it->second;
    }
  } else if (std::filesystem::exists(single)) {
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
    throw InputError(shards_[where_.at(name)]->path(),
                     "tensor '" + name + "' has shape " + shape_str(t.sizes().vec()) + ", config.json implies " + shape_str(expected));
  return t;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [n, i] : where_) out.push_back(n);
  return out;
}

}  // namespace kvscope
