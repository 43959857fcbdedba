#pragma once
// C ABI of the SentencePiece plugin (libkvscope_sentencepiece.so).
//
// Why a plugin: Debian's libsentencepiece embeds its own protobuf-lite 3.14 and exports those
// symbols, while LibTorch links libprotobuf 3.21; in one link map they interpose and the process
// crashes at start-up. kvscope_core therefore dlopen()s this plugin with RTLD_LOCAL | RTLD_DEEPBIND
// so each library keeps its own protobuf.
#include <stddef.h>
#include <stdint.h>

extern "C" {
/// Loads a .model; returns a handle or null (then `error` holds a message).
void* kvscope_spm_load(const char* path, char* error, size_t error_len);
void kvscope_spm_free(void* handle);
/// Encodes UTF-8 text; writes up to `cap` ids and returns the total count.
int64_t kvscope_spm_encode(void* handle, const char* text, size_t len, int32_t* out, int64_t cap);
int32_t kvscope_spm_vocab_size(void* handle);
/// The piece of `id` (valid while the handle lives).
const char* kvscope_spm_piece(void* handle, int32_t id);
/// Bit flags of `id`: 1 control, 2 byte, 4 unknown.
int32_t kvscope_spm_kind(void* handle, int32_t id);
}
