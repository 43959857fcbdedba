// Safetensors header and sharded-index parsing: bytes in, validated entries out (no ATen, no I/O).
#include <algorithm>
#include <cstring>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "json_integers.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/safetensors.h"

namespace kvscope {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string range_str(const SafetensorsEntry& e) {
  return "bytes [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ")";
}

/// The data section must be the tensors back to back, as the reference implementation (the
/// safetensors crate's Metadata::validate) requires: sorted by offset, each begins where the one
/// before it ends, the first at 0, the last at the end of the file. So no two tensors share bytes
/// (a file could otherwise load one tensor's weights as another's) and no bytes belong to none.
/// Each tensor must also begin at a multiple of its element size (the crate's writer puts larger
/// dtypes first, so its files always do).
void check_layout(const std::map<std::string, SafetensorsEntry>& entries, uint64_t data_size,
                  const std::filesystem::path& path) {
  std::vector<const std::pair<const std::string, SafetensorsEntry>*> order;
  for (const auto& kv : entries) order.push_back(&kv);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return std::tie(a->second.begin, a->second.end, a->first) < std::tie(b->second.begin, b->second.end, b->first);
  });
  uint64_t covered = 0;
  const std::pair<const std::string, SafetensorsEntry>* prev = nullptr;
  for (const auto* kv : order) {
    const auto& [name, e] = *kv;
    if (prev && e.begin < covered)
      throw InputError(path, "tensors '" + prev->first + "' (" + range_str(prev->second) + ") and '" + name + "' (" +
                                 range_str(e) + ") overlap: a safetensors data section holds each tensor once");
    if (e.begin > covered)
      throw InputError(path, "bytes [" + std::to_string(covered) + ", " + std::to_string(e.begin) +
                                 ") of the data section belong to no tensor (the next is '" + name + "', " +
                                 range_str(e) + "): safetensors tensors lie back to back");
    if (e.begin % safetensors_dtype_size(e.dtype) != 0)
      throw InputError(path, "tensor '" + name + "' (" + range_str(e) + ") begins at byte " + std::to_string(e.begin) +
                                 ", not a multiple of its element size " +
                                 std::to_string(safetensors_dtype_size(e.dtype)) + " (" + e.dtype + ")");
    covered = e.end;
    prev = kv;
  }
  if (covered != data_size)
    throw InputError(path, "the tensors end at byte " + std::to_string(covered) + " of the " +
                               std::to_string(data_size) + "-byte data section: the last " +
                               std::to_string(data_size - covered) + " bytes belong to no tensor");
}

}  // namespace

size_t safetensors_dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64") return 8;
  if (d == "F32" || d == "I32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL") return 1;
  return 0;
}

SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> bytes, const std::filesystem::path& path) {
  const size_t size = bytes.size();
  if (size < 8) throw InputError(path, "truncated safetensors: " + std::to_string(size) + " bytes, no header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);  // little-endian u64 (x86-64 / aarch64 hosts)
  if (header_len > size - 8)
    throw InputError(path, "truncated safetensors: header length " + std::to_string(header_len) +
                               " exceeds the file size " + std::to_string(size));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(reinterpret_cast<const char*>(bytes.data()) + 8,
                                   reinterpret_cast<const char*>(bytes.data()) + 8 + header_len);
  } catch (const nlohmann::json::exception& e) {  // parse_error; out_of_range for a number past double
    throw InputError(path, std::string("safetensors header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) throw InputError(path, "safetensors header is not a JSON object");
  SafetensorsHeader out;
  out.data_offset = 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    SafetensorsEntry entry;
    try {
      entry.dtype = e.at("dtype").get<std::string>();
      for (const auto& d : e.at("shape")) {
        const auto v = json_integer(d, 0, INT64_MAX);
        if (!v)
          throw InputError(path, "tensor '" + name + "': shape entry " + d.dump() + " is not a non-negative integer");
        entry.shape.push_back(*v);
      }
      const auto& off = e.at("data_offsets");
      if (!off.is_array() || off.size() != 2)
        throw InputError(path, "tensor '" + name + "': data_offsets must have 2 entries");
      const auto begin = json_integer(off[0], 0, INT64_MAX), end = json_integer(off[1], 0, INT64_MAX);
      if (!begin || !end)
        throw InputError(path, "tensor '" + name + "': data_offsets " + off.dump() + " are not byte offsets");
      entry.begin = static_cast<uint64_t>(*begin);
      entry.end = static_cast<uint64_t>(*end);
    } catch (const nlohmann::json::exception& ex) {
      throw InputError(path, "tensor '" + name + "': malformed header entry (" + ex.what() + ")");
    }
    const size_t itemsize = safetensors_dtype_size(entry.dtype);
    if (itemsize == 0) throw InputError(path, "tensor '" + name + "': unsupported dtype " + entry.dtype);
    uint64_t bytes_needed = itemsize;
    for (int64_t d : entry.shape) {
      if (d < 0) throw InputError(path, "tensor '" + name + "': negative dimension in shape " + shape_str(entry.shape));
      // A product past 2^64 would wrap and could match a small byte range (and the tensor view
      // would then read far outside the file).
      if (__builtin_mul_overflow(bytes_needed, static_cast<uint64_t>(d), &bytes_needed))
        throw InputError(
            path, "tensor '" + name + "': shape " + shape_str(entry.shape) + " x " + entry.dtype + " is too large");
    }
    if (entry.end < entry.begin || entry.end - entry.begin != bytes_needed)
      throw InputError(path, "tensor '" + name + "': byte range " + std::to_string(entry.end - entry.begin) +
                                 " does not match shape " + shape_str(entry.shape) + " x " + entry.dtype);
    if (entry.end > data_size)
      throw InputError(path, "truncated safetensors: tensor '" + name + "' ends at byte " + std::to_string(entry.end) +
                                 " of a " + std::to_string(data_size) + "-byte data section");
    out.entries.emplace(name, std::move(entry));
  }
  check_layout(out.entries, data_size, path);
  return out;
}

std::map<std::string, std::string> parse_safetensors_index(std::string_view json_text,
                                                           const std::filesystem::path& index) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {  // parse_error; out_of_range for a number past double
    throw InputError(index, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw InputError(index, "missing 'weight_map' object");
  std::map<std::string, std::string> out;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) throw InputError(index, "weight_map['" + name + "'] is not a file name");
    const std::string f = file.get<std::string>();
    const std::filesystem::path fp(f);
    // The shard must be a file beside the index: never an absolute path or one climbing out.
    const bool climbs = std::any_of(fp.begin(), fp.end(), [](const auto& part) { return part == ".."; });
    if (f.empty() || fp.is_absolute() || climbs || !fp.has_filename() || f.find('\0') != std::string::npos)
      throw InputError(index, "weight_map['" + name + "'] = '" + f + "' is not a file name in the checkpoint folder");
    out.emplace(name, f);
  }
  return out;
}

}  // namespace kvscope
