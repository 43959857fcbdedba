// "streamingllm" scoring: StreamingLLM (Xiao et al. 2024, arXiv 2309.17453), §3.2 "rolling KV
// cache with attention sinks": keep the first `sink` tokens plus the most recent ones.
//
//   score[h,j] = kKeepScore   for j < sink
//   score[h,j] = j            otherwise (newer = higher), the same for every KV head
//
// so a top-n_kept selection keeps the sinks and the n_kept - sink most recent entries. kvpress
// (streaming_llm_press.py) instead writes 1 for kept / 0 for the n_tok - n_kept entries after the
// sinks, which needs the budget inside the scorer; both give the same kept set for any n_kept.
// Shapes: in.keys [n_head_kv, n_tok, D] (only its shape is read); returns fp32 [n_head_kv, n_tok].
// As in kvpress, keys keep their original RoPE positions (no re-rotation).
#include <ATen/ATen.h>

#include "policies/param_builders.h"
#include "policies/scoring.h"

namespace kvscope::policies {
namespace {

constexpr const char* kRef = "StreamingLLM (Xiao et al. 2024) §3.2";

class StreamingLlm : public ScoringBase {
 public:
  explicit StreamingLlm(const ParamValues& v) : ScoringBase("streamingllm", v), sink_(param_int(v, "sink")) {}
  int64_t prefill_queries() const override { return 0; }
  at::Tensor score(const LayerPrefill& in) const override {
    check_layer_prefill("streamingllm", in, /*needs_queries=*/false);
    const int64_t Hkv = in.keys.size(0), n = in.keys.size(1);
    at::Tensor s = at::arange(n, in.keys.options().dtype(at::kFloat)).unsqueeze(0).repeat({Hkv, 1});
    s.narrow(1, 0, std::min(sink_, n)).fill_(kKeepScore);
    return s;
  }

 private:
  int64_t sink_;
};

}  // namespace

PolicyRegistry::Entry streamingllm_entry() {
  return {"streamingllm",
          Stage::kScoring,
          {int_param("sink", 0, 1 << 20, "4", "attention-sink tokens at the start that are always kept", kRef)},
          "first `sink` tokens + most recent tokens (StreamingLLM, Xiao et al. 2024 §3.2)",
          [](const ParamValues& v) -> std::unique_ptr<Policy> { return std::make_unique<StreamingLlm>(v); },
          "position (newer = higher; StreamingLLM §3.2); sink tokens always kept"};
}

}  // namespace kvscope::policies
