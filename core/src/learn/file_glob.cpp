#include "kvscope/core/learn/file_glob.h"

#include <fnmatch.h>

#include <algorithm>
#include <set>

namespace kvscope::learn {
namespace {

namespace fs = std::filesystem;

bool has_wildcard(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

/// Walks the components of `parts` from index `i` below `dir`, adding matches to `out`.
void walk(const fs::path& dir, const std::vector<std::string>& parts, size_t i, std::set<fs::path>& out) {
  std::error_code ec;
  if (i == parts.size()) {
    if (fs::is_regular_file(dir, ec)) out.insert(dir);
    return;
  }
  const std::string& part = parts[i];
  if (part == "**") {
    walk(dir, parts, i + 1, out);  // zero directories
    for (fs::directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end; !ec && it != end;
         it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (!name.empty() && name[0] != '.' && it->is_directory(ec) && !it->is_symlink(ec))
        walk(it->path(), parts, i, out);
    }
    return;
  }
  if (!has_wildcard(part)) {
    const fs::path next = dir / part;
    if (fs::exists(next, ec)) walk(next, parts, i + 1, out);
    return;
  }
  for (fs::directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (::fnmatch(part.c_str(), name.c_str(), FNM_PERIOD) == 0) walk(it->path(), parts, i + 1, out);
  }
}

}  // namespace

std::vector<fs::path> expand_glob(const std::string& pattern) {
  if (pattern.empty()) return {};
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= pattern.size(); ++i)
    if (i == pattern.size() || pattern[i] == '/') {
      if (i > start) parts.push_back(pattern.substr(start, i - start));
      start = i + 1;
    }
  const fs::path root = pattern[0] == '/' ? fs::path("/") : fs::path(".");
  std::set<fs::path> found;
  walk(root, parts, 0, found);
  std::vector<fs::path> out;
  for (const fs::path& p : found) out.push_back(pattern[0] == '/' ? p : p.lexically_relative("."));
  return out;
}

}  // namespace kvscope::learn
