#include "work_split.h"

#include <algorithm>
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
  if (text.empty()) return devices;
  std::stringstream ss(text);
  for (std::string d; std::getline(ss, d, ',');) {
    const bool digits =
        !d.empty() && d.size() <= 4 && std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits)
      throw InputError("--devices must be CUDA device ids separated by commas, e.g. 0,1 (got '" + text + "')");
    const std::string dev = "cuda:" + std::to_string(std::stoi(d));
    if (std::find(devices.begin(), devices.end(), dev) != devices.end())
      throw InputError("--devices names " + dev + " twice (got '" + text + "')");
    devices.push_back(dev);
  }
  if (!text.empty() && text.back() == ',')
    throw InputError("--devices must be CUDA device ids separated by commas, e.g. 0,1 (got '" + text + "')");
  return devices;
}

}  // namespace kvscope::cli
