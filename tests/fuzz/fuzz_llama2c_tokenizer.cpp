// libFuzzer: llama2.c tok.bin (max_token_length, then score/length/bytes records), then encode
// and decode. The first byte picks the expected token count (0 = read to the end, as
// load_tokenizer does; else 259 + byte, as a checkpoint's vocab_size does).
// Oracle: bad files throw InputError only; a loaded tokenizer encodes any text to valid ids.
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "kvscope/core/errors.h"
#include "kvscope/core/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int32_t vocab = data[0] < 128 ? 0 : 259 + (data[0] - 128);
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::unique_ptr<kvscope::Tokenizer> tok;
  try {
    tok = kvscope::load_llama2c_tokenizer_bytes(bytes, vocab, "tok.bin");
  } catch (const kvscope::InputError&) {
    return 0;
  }
  for (std::string_view sample :
       {std::string_view("Once upon a time, \xc3\xa9\xe4\xb8\x96 \xff\x80"), bytes.substr(0, 48)}) {
    const std::vector<int32_t> ids = tok->encode(sample);
    for (int32_t id : ids)
      if (id < 0 || id >= tok->vocab_size()) std::abort();
    (void)tok->decode(ids);
  }
  const std::vector<int32_t> odd = {-1, 0, 1, 2, tok->vocab_size() - 1, tok->vocab_size(), 1 << 30};
  (void)tok->decode(odd);
  for (int32_t id : odd) (void)tok->token_text(id);
  return 0;
}
