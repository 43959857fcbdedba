// libFuzzer: the llama2.c checkpoint header (7 x int32) and the payload size it implies.
// Oracle: bad headers throw InputError only; an accepted header's config validates and the bytes
// hold every float it implies.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "kvscope/core/errors.h"
#include "kvscope/core/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const kvscope::ModelConfig c = kvscope::parse_llama2c_header(std::span<const uint8_t>(data, size), "model.bin");
    c.validate("model.bin");
    if (c.max_position_embeddings <= 0 || c.hidden_size % c.n_head != 0) std::abort();
    const unsigned __int128 embed = static_cast<unsigned __int128>(c.vocab_size) * c.hidden_size;
    if (28 + embed * 4 > size) std::abort();
  } catch (const kvscope::InputError&) {
  }
  return 0;
}
