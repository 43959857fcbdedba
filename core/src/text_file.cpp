#include "text_file.h"

#include <fstream>
#include <sstream>

#include "kvscope/core/errors.h"

namespace kvscope {

std::string missing_file_problem(const std::filesystem::path& path) {
  std::error_code ec;  // the throwing exists() would escape as filesystem_error for a symlink loop
  if (std::filesystem::exists(path, ec)) return "cannot be read";
  if (ec && ec != std::errc::no_such_file_or_directory) return "cannot be opened: " + ec.message();
  return "no such file";
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, missing_file_problem(path));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw InputError(path, "cannot be read");
  return ss.str();
}

}  // namespace kvscope
