#pragma once
// Shell-style file globs with a recursive `**` component, for training-text inputs
// (`kvscope-cli learn-heads --data GLOB`).
#include <filesystem>
#include <string>
#include <vector>

namespace kvscope::learn {

/// Regular files matching `pattern`, sorted by path. Components are matched with fnmatch(3)
/// (`*`, `?`, `[...]`; a leading `.` must be matched explicitly); a component that is exactly `**`
/// matches zero or more directories (hidden ones included only when named). A pattern without
/// wildcards names one file. Unreadable directories are skipped. Never throws for no match:
/// returns an empty list (the caller names the glob in its error).
std::vector<std::filesystem::path> expand_glob(const std::string& pattern);

}  // namespace kvscope::learn
