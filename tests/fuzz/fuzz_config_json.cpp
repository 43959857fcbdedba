// libFuzzer: Hugging Face config.json -> ModelConfig.
// Oracle: bad JSON content throws InputError only; an accepted config passes validate() and its
// derived sizes (group size, parameter count) are computable.
#include <cstdint>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "kvscope/core/errors.h"
#include "kvscope/core/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;  // JSON syntax is nlohmann's; the config's content is ours
  try {
    const kvscope::ModelConfig c = kvscope::parse_hf_config_json(j, "config.json");
    c.validate("config.json");
    if (c.group_size() < 1 || c.head_dim % 2 != 0) std::abort();
    if (c.parameter_count() <= 0) std::abort();
  } catch (const kvscope::InputError&) {
  }
  return 0;
}
