// libFuzzer: model.safetensors.index.json (the sharded checkpoint's weight_map).
// Oracle: bad text throws InputError only; every accepted shard name stays inside the checkpoint
// folder (relative, no "..").
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "kvscope/core/errors.h"
#include "kvscope/core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto map = kvscope::parse_safetensors_index(std::string_view(reinterpret_cast<const char*>(data), size),
                                                      "model.safetensors.index.json");
    for (const auto& [name, file] : map) {
      const auto inside = (std::filesystem::path("/ckpt") / file).lexically_normal();
      if (file.empty() || std::filesystem::path(file).is_absolute() || inside.string().rfind("/ckpt/", 0) != 0)
        std::abort();
    }
  } catch (const kvscope::InputError&) {
  }
  return 0;
}
