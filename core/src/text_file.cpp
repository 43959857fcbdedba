#include "text_file.h"

#include <fstream>
#include <sstream>

#include "kvscope/core/errors.h"

namespace kvscope {

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, std::filesystem::exists(path) ? "cannot be read" : "no such file");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw InputError(path, "cannot be read");
  return ss.str();
}

}  // namespace kvscope
