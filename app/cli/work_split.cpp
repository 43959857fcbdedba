#include "work_split.h"

#include <cstdio>
#include <sstream>

#include "kvscope/core/errors.h"

namespace kvscope::cli {

Shard parse_shard(const std::string& text) {
  if (text.empty()) return {};
  unsigned long long i = 0, n = 0;
  char end = 0;
  if (std::sscanf(text.c_str(), "%llu/%llu%c", &i, &n, &end) != 2 || n == 0 || i >= n)
    throw InputError("--shard must be i/n with 0 <= i < n (got '" + text + "')");
  return {i, n};
}

std::vector<std::string> parse_devices(const std::string& text) {
  std::vector<std::string> devices;
  std::stringstream ss(text);
  for (std::string d; std::getline(ss, d, ',');) devices.push_back("cuda:" + d);
  return devices;
}

}  // namespace kvscope::cli
