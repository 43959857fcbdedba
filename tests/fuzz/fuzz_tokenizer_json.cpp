// libFuzzer: tokenizer.json (vocab, merges, normalizers, pre-tokenizers, decoders, added tokens),
// then encode and decode with the loaded tokenizer.
// Oracle: bad files throw InputError only; a loaded tokenizer encodes to ids it knows and decodes
// any ids (known or not) without throwing.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "kvscope/core/errors.h"
#include "kvscope/core/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<kvscope::Tokenizer> tok;
  try {
    tok = kvscope::load_hf_tokenizer_text(text, "tokenizer.json");
  } catch (const kvscope::InputError&) {
    return 0;
  }
  for (std::string_view sample :
       {std::string_view("def f(x):\n    return x  # héllo 世界 \xff\xfe"), text.substr(0, 64)}) {
    std::vector<int32_t> ids;
    try {
      ids = tok->encode(sample);
    } catch (const kvscope::InputError&) {
      continue;  // PCRE2 match limits on a pathological pattern
    }
    for (int32_t id : ids)
      if (id < 0 || id >= tok->vocab_size()) std::abort();
    (void)tok->decode(ids);
  }
  const std::vector<int32_t> odd = {-1, 0, 1, 2, 255, 256, tok->vocab_size() - 1, tok->vocab_size(), 1 << 30};
  (void)tok->decode(odd);
  for (int32_t id : odd) (void)tok->token_text(id);
  return 0;
}
