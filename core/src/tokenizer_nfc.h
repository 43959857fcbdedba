#pragma once
// Unicode Normalization Form C, for the NFC normalizer of tokenizer.json (Qwen2, Qwen3) (internal
// to kvscope_core).
#include <string>
#include <string_view>

namespace kvscope {

/// `text` in NFC (UAX #15: canonical decomposition, canonical ordering, canonical composition;
/// tables of Unicode 14, tokenizer_nfc_data.inc). Bytes that are not well-formed UTF-8 are kept
/// as they are and block composition across them. Text whose code points are all below U+0300
/// (ASCII, Latin-1, ...) is NFC already and comes back unchanged without table look-ups.
std::string to_nfc(std::string_view text);

}  // namespace kvscope
