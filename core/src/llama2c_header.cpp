// The llama2.c "legacy v0" checkpoint header: 7 x int32 -> ModelConfig, checked against the size
// of the file the shapes imply (no ATen, no I/O).
#include <cstring>
#include <limits>

#include "kvscope/core/errors.h"
#include "kvscope/core/model.h"

namespace kvscope {

namespace {

/// Floats of the weights after the header, in 128-bit arithmetic: a forged header's dims (each up
/// to 2^31) overflow int64 products.
unsigned __int128 llama2c_payload_floats(const ModelConfig& c) {
  using u128 = unsigned __int128;
  const u128 dim = c.hidden_size, hid = c.intermediate_size, L = c.n_layer, V = c.vocab_size;
  const u128 kv_dim = u128(c.n_head_kv) * c.head_dim, S = c.max_position_embeddings, hs = c.head_dim;
  return V * dim + L * dim + L * dim * dim + 2 * L * kv_dim * dim + L * dim * dim + L * dim + 3 * L * hid * dim + dim +
         S * hs + (c.tie_word_embeddings ? 0 : V * dim);
}

}  // namespace

ModelConfig parse_llama2c_header(std::span<const uint8_t> bytes, const std::filesystem::path& bin) {
  int32_t h[7];
  if (bytes.size() < sizeof(h))
    throw InputError(bin, "truncated llama2.c checkpoint: " + std::to_string(bytes.size()) + " bytes, header needs 28");
  std::memcpy(h, bytes.data(), sizeof(h));
  ModelConfig c;
  c.model_type = "llama2c";
  c.hidden_size = h[0];
  c.intermediate_size = h[1];
  c.n_layer = h[2];
  c.n_head = h[3];
  c.n_head_kv = h[4];
  c.tie_word_embeddings = h[5] > 0;
  c.vocab_size = h[5] > 0 ? h[5] : -int64_t{h[5]};
  c.max_position_embeddings = h[6];
  c.head_dim = c.n_head > 0 ? c.hidden_size / c.n_head : 0;
  c.rope_layout = RopeLayout::kAdjacentPairs;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-5;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  c.weights_dtype = "float32";
  if (c.max_position_embeddings <= 0)  // in the header's own words, before validate's config.json names
    throw InputError(bin, "seq_len must be > 0 (got " + std::to_string(c.max_position_embeddings) + ")");
  c.validate(bin);
  if (c.hidden_size % c.n_head != 0) throw InputError(bin, "dim is not a multiple of n_heads");
  const unsigned __int128 need = sizeof(h) + llama2c_payload_floats(c) * sizeof(float);
  if (bytes.size() < need) {
    const bool huge = need > std::numeric_limits<uint64_t>::max();
    throw InputError(bin, "truncated llama2.c checkpoint: " + std::to_string(bytes.size()) +
                              " bytes, the header implies " +
                              (huge ? std::string("more than 2^64") : std::to_string(static_cast<uint64_t>(need))));
  }
  // More bytes than the header implies: its n_layers (or another size) is smaller than the weights'
  // (llama2.c's run.c would read them at the wrong offsets; export.py writes the exact size).
  if (bytes.size() > need)
    throw InputError(
        bin, "llama2.c checkpoint of " + std::to_string(bytes.size()) + " bytes, " +
                 std::to_string(bytes.size() - static_cast<uint64_t>(need)) + " more than its header implies (dim " +
                 std::to_string(h[0]) + ", hidden_dim " + std::to_string(h[1]) + ", n_layers " + std::to_string(h[2]) +
                 ", n_heads " + std::to_string(h[3]) + ", n_kv_heads " + std::to_string(h[4]) + ", vocab_size " +
                 std::to_string(h[5]) + ", seq_len " + std::to_string(h[6]) + " -> " +
                 std::to_string(static_cast<uint64_t>(need)) + " bytes): the header does not match its weights");
  return c;
}

}  // namespace kvscope
