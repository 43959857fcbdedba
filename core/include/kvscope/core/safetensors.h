#pragma once
// Memory-mapped safetensors checkpoints: single files and sharded model.safetensors.index.json.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace kvscope {

class MappedFile;

/// One tensor's entry in a safetensors header.
struct SafetensorsEntry {
  std::string dtype;             ///< "F32" | "F16" | "BF16" | ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;   ///< byte offsets into the data section
};

/// A read-only memory-mapped .safetensors file. Tensors are zero-copy CPU views into the mapping
/// (the mapping stays alive as long as any view does).
class SafetensorsFile {
 public:
  /// Maps and validates `path`: header length, JSON, dtypes, offsets inside the file, byte sizes
  /// matching shapes. Throws InputError(path, ...) on any problem (missing, truncated, bad header).
  explicit SafetensorsFile(const std::filesystem::path& path);
  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  /// CPU tensor viewing the mapped bytes (dtype as stored). Throws InputError if `name` is absent.
  at::Tensor tensor(const std::string& name) const;

 private:
  std::filesystem::path path_;
  std::shared_ptr<MappedFile> map_;
  const uint8_t* data_ = nullptr;  // start of the data section
  std::map<std::string, SafetensorsEntry> entries_;
};

/// Named tensors of a checkpoint: one model.safetensors, or the shards listed by
/// model.safetensors.index.json ("weight_map": name -> shard file).
class SafetensorsCheckpoint {
 public:
  /// `dir` must hold model.safetensors or model.safetensors.index.json (index wins).
  /// Throws InputError naming the file that is missing or malformed.
  explicit SafetensorsCheckpoint(const std::filesystem::path& dir);
  bool contains(const std::string& name) const;
  /// Zero-copy CPU view. Throws InputError("<dir>: tensor '<name>' not found").
  at::Tensor tensor(const std::string& name) const;
  /// Same, and checks the shape. Throws InputError(file, "tensor 'x' has shape [..], expected [..]").
  at::Tensor tensor(const std::string& name, const std::vector<int64_t>& expected_shape) const;
  std::vector<std::string> names() const;

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, size_t> where_;  // tensor name -> shard index
};

}  // namespace kvscope
