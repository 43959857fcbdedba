#pragma once
// Memory-mapped safetensors checkpoints: single files and sharded model.safetensors.index.json.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/core/Tensor.h>

namespace kvscope {

class MappedFile;

/// One tensor's entry in a safetensors header.
struct SafetensorsEntry {
  std::string dtype;  ///< "F32" | "F16" | "BF16" | ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  ///< byte offsets into the data section
};

/// The validated header of a safetensors file: its entries and where the data section begins.
struct SafetensorsHeader {
  std::map<std::string, SafetensorsEntry> entries;
  uint64_t data_offset = 0;  ///< 8 + header length
};

/// Bytes per element of a safetensors dtype ("F32", "BF16", ...); 0 if kvscope does not support it.
size_t safetensors_dtype_size(const std::string& dtype);

/// Parses and validates the first bytes of a safetensors file (`bytes` = the whole file): header
/// length, JSON, dtypes, shapes (no overflow), offsets inside `bytes`, byte sizes matching shapes,
/// and the layout the reference implementation requires: the tensors back to back from byte 0 to
/// the end of the file (none overlapping, no bytes belonging to none), each beginning at a multiple
/// of its element size. Throws InputError(source, ...) on any problem, naming the tensors and byte
/// ranges involved. SafetensorsFile uses it on the mapped file.
SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> bytes, const std::filesystem::path& source);

/// Parses model.safetensors.index.json text: its "weight_map" (tensor name -> shard file name).
/// Shard names must be relative paths inside the checkpoint folder (not absolute, no "..", not
/// empty). Throws InputError(source, ...).
std::map<std::string, std::string> parse_safetensors_index(std::string_view json_text,
                                                           const std::filesystem::path& source);

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
  /// CPU tensor viewing the mapped bytes (dtype as stored); a copy where the data section itself is
  /// not aligned to the element size (a header length that is not a multiple of 8, as in files
  /// written before the header was padded). Throws InputError if `name` is absent.
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
  /// The file that lists the tensors: model.safetensors.index.json, else model.safetensors.
  const std::filesystem::path& source() const { return source_; }

 private:
  std::filesystem::path dir_, source_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, size_t> where_;  // tensor name -> shard index
};

}  // namespace kvscope
