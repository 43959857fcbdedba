#pragma once
// Read-only mmap of a whole file (internal to kvscope_core).
#include <cstddef>
#include <cstdint>
#include <filesystem>

namespace kvscope {

/// Maps `path` read-only. Throws InputError(path, ...) if it cannot be opened or mapped.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kvscope
