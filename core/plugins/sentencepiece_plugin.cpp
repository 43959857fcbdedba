// libkvscope_sentencepiece.so: a thin C wrapper over libsentencepiece (see sentencepiece_plugin.h).
#include "sentencepiece_plugin.h"

#include <cstring>
#include <string>
#include <vector>

#include <sentencepiece_processor.h>

namespace {
struct Handle {
  sentencepiece::SentencePieceProcessor sp;
  std::vector<std::string> pieces;
};
}  // namespace

extern "C" {

void* kvscope_spm_load(const char* path, char* error, size_t error_len) {
  auto* h = new Handle;
  const auto status = h->sp.Load(path);
  if (!status.ok()) {
    std::strncpy(error, status.ToString().c_str(), error_len - 1);
    error[error_len - 1] = '\0';
    delete h;
    return nullptr;
  }
  for (int i = 0; i < h->sp.GetPieceSize(); ++i) h->pieces.push_back(h->sp.IdToPiece(i));
  return h;
}

void kvscope_spm_free(void* handle) { delete static_cast<Handle*>(handle); }

int64_t kvscope_spm_encode(void* handle, const char* text, size_t len, int32_t* out, int64_t cap) {
  std::vector<int> ids;
  static_cast<Handle*>(handle)->sp.Encode(std::string_view(text, len), &ids);
  for (int64_t i = 0; i < static_cast<int64_t>(ids.size()) && i < cap; ++i) out[i] = ids[i];
  return static_cast<int64_t>(ids.size());
}

int32_t kvscope_spm_vocab_size(void* handle) { return static_cast<Handle*>(handle)->sp.GetPieceSize(); }

const char* kvscope_spm_piece(void* handle, int32_t id) { return static_cast<Handle*>(handle)->pieces[id].c_str(); }

int32_t kvscope_spm_kind(void* handle, int32_t id) {
  const auto& sp = static_cast<Handle*>(handle)->sp;
  return (sp.IsControl(id) ? 1 : 0) | (sp.IsByte(id) ? 2 : 0) | (sp.IsUnknown(id) ? 4 : 0);
}
}
