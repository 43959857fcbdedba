// llama2.c "legacy v0" checkpoints (karpathy/llama2.c run.c format).
#include <ATen/ATen.h>

#include "kvscope/core/errors.h"
#include "kvscope/core/model.h"
#include "mapped_file.h"

namespace kvscope {

Model load_llama2c_model(const std::filesystem::path& bin, const LoadOptions& o) {
  auto file = std::make_shared<MappedFile>(bin);
  Model m;
  m.source = bin;
  m.device = o.device;
  m.dtype = o.dtype;
  m.config = parse_llama2c_header({file->data(), file->size()}, bin);
  const ModelConfig& c = m.config;
  const int64_t dim = c.hidden_size, hid = c.intermediate_size, L = c.n_layer, V = c.vocab_size;
  const int64_t kv_dim = c.n_head_kv * c.head_dim, S = c.max_position_embeddings, hs = c.head_dim;
  constexpr size_t kHeaderBytes = 7 * sizeof(int32_t);

  const float* p = reinterpret_cast<const float*>(file->data() + kHeaderBytes);
  auto take = [&](std::vector<int64_t> shape) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    at::Tensor t = at::from_blob(
        const_cast<float*>(p), shape, [file](void*) {}, at::kFloat);
    p += n;
    return t;
  };
  auto target = [&](const at::Tensor& t) { return t.to(o.device, o.dtype).contiguous(); };
  at::Tensor emb = take({V, dim}), rms_att = take({L, dim}), wq = take({L, dim, dim}), wk = take({L, kv_dim, dim}),
             wv = take({L, kv_dim, dim}), wo = take({L, dim, dim}), rms_ffn = take({L, dim}), w1 = take({L, hid, dim}),
             w2 = take({L, dim, hid}), w3 = take({L, hid, dim}), rms_final = take({dim});
  p += S * hs;  // freq_cis_real + freq_cis_imag [seq_len, head_dim/2] each: recomputed, never read
  m.weights.embed = target(emb);
  m.weights.final_norm = target(rms_final);
  m.weights.lm_head = c.tie_word_embeddings ? m.weights.embed : target(take({V, dim}));
  for (int64_t i = 0; i < L; ++i) {
    LayerWeights l;
    l.attn_norm = target(rms_att[i]);
    l.w_qkv = target(at::cat({wq[i], wk[i], wv[i]}));
    l.w_o = target(wo[i]);
    l.mlp_norm = target(rms_ffn[i]);
    l.w_gate_up = target(at::cat({w1[i], w3[i]}));  // w1 = gate, w3 = up, w2 = down
    l.w_down = target(w2[i]);
    m.weights.layers.push_back(std::move(l));
  }
  // Tokenizer: explicit override, else tok<vocab>.bin, else tok*.bin / tokenizer.model beside the file.
  namespace fs = std::filesystem;
  fs::path tok = o.tokenizer;
  if (tok.empty()) {
    const fs::path dir = bin.parent_path().empty() ? fs::path(".") : bin.parent_path();
    const fs::path exact = dir / ("tok" + std::to_string(V) + ".bin");
    if (fs::exists(exact))
      tok = exact;
    else if (fs::exists(dir / "tokenizer.bin"))
      tok = dir / "tokenizer.bin";
    else
      throw InputError(bin, "no tokenizer found beside it (looked for " + exact.filename().string() +
                                " and tokenizer.bin; pass --tokenizer)");
  }
  m.tokenizer = tok.extension() == ".bin" ? load_llama2c_tokenizer(tok, static_cast<int32_t>(V)) : load_tokenizer(tok);
  // run.c stops generation at the next BOS; EOS ends a story as well.
  m.stop_token_ids = {1, 2};
  m.add_bos = true;
  return m;
}

}  // namespace kvscope
