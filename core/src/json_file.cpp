#include "json_file.h"

#include <fstream>
#include <sstream>

#include "kvscope/core/errors.h"
#include "text_file.h"

namespace kvscope {

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, missing_file_problem(path));
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {  // parse_error; out_of_range for a number past double
    throw InputError(path, std::string("not valid JSON: ") + e.what());
  }
}

}  // namespace kvscope
