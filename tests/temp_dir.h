#pragma once
// A scratch directory for a test, shared by every test target (header-only, no LibTorch).
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kvscope::test {

/// Deletes a directory tree (or file); missing paths are fine. Not std::filesystem::remove_all:
/// PyTorch's pip LibTorch exports its own copy of that symbol, which crashes when it interposes.
inline void remove_tree(const std::filesystem::path& p) {
  ::nftw(
      p.c_str(), [](const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

/// A fresh directory under the system's temporary directory (mkdtemp: "kvscope-TAG-XXXXXX"),
/// removed with everything in it when the object goes. Throws std::runtime_error if it cannot be
/// created.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / ("kvscope-" + tag + "-XXXXXX")).string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() { remove_tree(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  /// The path of `name` inside, as a string (the file need not exist).
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  /// Writes `text` to `name` inside (creating its parent directories); returns its path.
  std::filesystem::path write(const std::string& name, std::string_view text) const {
    const std::filesystem::path f = path_ / name;
    std::filesystem::create_directories(f.parent_path());
    std::ofstream(f, std::ios::binary).write(text.data(), static_cast<std::streamsize>(text.size()));
    return f;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace kvscope::test
