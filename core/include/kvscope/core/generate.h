#pragma once
// The generation loop: prefill, then decode until a stop token or the token limit.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kvscope/core/capture.h"
#include "kvscope/core/engine.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/sampling.h"
#include "kvscope/core/timeline.h"

namespace kvscope {

/// How to add the model's BOS token in front of the prompt.
enum class BosMode { kAuto, kAlways, kNever };

/// A run in progress (GenerateRequest::on_progress): what a live view shows.
struct GenerateProgress {
  int64_t decode_steps = 0;                  ///< forward passes so far
  double decode_tokens_per_s = 0;            ///< so far
  int64_t cache_bytes_live = 0;              ///< K+V bytes held now
  bool decode_graph = false;                 ///< decode replays a CUDA graph
  std::vector<double> kl;                    ///< per-step KL so far (reference full)
  std::shared_ptr<const Timeline> timeline;  ///< the record so far (capture on), else null
};

/// Prefill once, compress many (question-agnostic evaluation, kvscope-cli eval): a context
/// prefilled once without compression, with what the pipelines' stages read of it, so that each
/// pipeline compresses a copy instead of prefilling again. A pipeline compresses each layer after
/// that layer's prefill attention, which itself never sees a compressed cache, so the result is the
/// same as its own prefill. Only for pipelines with Pipeline::prefill_queries() >= 0, on models
/// without sliding-window layers.
struct SharedPrefill {
  std::vector<int32_t> ids;         ///< the tokens prefilled (GenerateRequest::prompt_ids must equal them)
  KvCache cache;                    ///< their full cache
  std::vector<at::Tensor> queries;  ///< per layer: the last n_queries post-RoPE queries [n, n_head, head_dim]
  at::Tensor logits;                ///< fp32 [vocab] on the model device: logits at the last token
};

/// Prefills `ids` once for SharedPrefill, keeping each layer's last `n_queries` queries, in a cache
/// of `capacity` entries per head (it grows if a later append needs more). Throws InputError for
/// an empty prompt or a model with sliding-window layers (their rings cannot be shared).
SharedPrefill prefill_shared(const Engine& engine, std::vector<int32_t> ids, int64_t n_queries, int64_t capacity);

struct GenerateRequest {
  std::vector<int32_t> prompt_ids;  ///< already including any BOS
  /// Question-agnostic compression (kvpress's pipeline): these tokens follow prompt_ids. The
  /// pipeline compresses the cache of prompt_ids alone (the context: its budget counts only those
  /// tokens, its observation window is the context's last tokens); then these are prefilled onto
  /// the compressed cache with their true positions, uncompressed, and decoding starts from their
  /// last logits. Empty: the pipeline compresses the whole prompt (question-aware).
  std::vector<int32_t> question_ids;
  /// The prompt already prefilled (prefill once, compress many): generate compresses a copy of its
  /// cache with its queries instead of prefilling the prompt. Null: prefill as usual.
  const SharedPrefill* shared = nullptr;
  int64_t max_new_tokens = 64;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;       ///< generation ends (the stop token is not emitted) on any of these
  int64_t prefill_chunk = 0;           ///< 0 = whole prompt at once
  const Pipeline* pipeline = nullptr;  ///< compress each layer after its prefill attention (null = full cache)
  BudgetSpec budget;                   ///< used with `pipeline`
  bool reference_full = false;         ///< also decode the same tokens with the full cache and report fidelity
  /// Multi-turn: token ids of each later user turn. After a turn's generation ends, its last chosen
  /// token and the next turn are prefilled onto the same cache (with the pipeline reselecting, as
  /// RocketKV-MT does), then generation continues.
  std::vector<std::vector<int32_t>> follow_up_turns;
  CaptureLevel capture = CaptureLevel::kOff;  ///< per-head statistics of the prefill (capture.h)
  int64_t capture_window = 32;                ///< observation window of the attention statistics
  /// With capture on: (layer, KV head) pairs whose decode-time selections the timeline records per
  /// token (the others per page; every head per token when the run is small, timeline_recorder.h).
  std::vector<std::pair<int64_t, int64_t>> pinned_heads;
  /// Called after the first prefill and then at most every progress_interval_ms during decode
  /// (and once when generation ends) with a snapshot; copying the timeline costs O(its size), so
  /// the interval grows to 20x the last snapshot's cost (at most ~5% of the run).
  std::function<void(const GenerateProgress&)> on_progress;
  double progress_interval_ms = 500;
  /// Called before each later turn's prefill with the turn (1 = the first follow_up_turns entry), on
  /// the generating thread: a streaming front end marks where the turn's tokens start.
  std::function<void(int64_t turn)> on_turn;
  /// Test probe: called in every decode step for every layer, after its attention, with the step
  /// (1-based, as Timeline counts: a later turn's prefill is a step too). Forces the eager path.
  std::function<void(const LayerEvent& ev, int64_t step)> decode_probe;
  /// Fault injection for tests: called before the prefill ("prefill", turn) and before each decode
  /// step ("decode", step). What it throws is handled like the engine's own errors, so a test can
  /// throw c10::Error("CUDA out of memory ...") to check the out-of-memory path on CPU.
  std::function<void(std::string_view phase, int64_t step)> fault_hook;
};

/// Per decode step agreement of the compressed run with the full cache fed the same tokens. Entry i
/// compares the two next-token distributions the compressed run chose its i-th token from (of all
/// turns in order: entry 0 from the prompt's prefill logits, entry i > 0 from the decode step that
/// fed token i-1), so in the first turn entry i belongs to output_ids[i]; a run that stopped on a
/// stop token has one more entry, for the (not emitted) stop token. The full cache is teacher-forced
/// on the compressed run's tokens. Probabilities are an fp32 softmax of the raw logits (temperature
/// 1, no top-p, whatever the sampling), in [0, 1]. All vectors have the same length.
struct Fidelity {
  std::vector<double> kl;            ///< KL(p_full || p_compressed) in nats
  std::vector<int> top1;             ///< 1 where both argmaxes agree
  std::vector<int32_t> token;        ///< token id the compressed run chose from this entry's logits
  std::vector<int32_t> full_top;     ///< argmax token id of the full cache's logits
  std::vector<double> p_token;       ///< p_compressed(token): the compressed run's probability of its token
  std::vector<double> p_full_top;    ///< p_full(full_top): the full cache's probability of its top token
  std::vector<double> p_full_token;  ///< p_full(token): the full cache's probability of the compressed token
};

/// Appends one entry to `f`: full and comp are one step's logits (fp32, [vocab] or [1, vocab], on
/// any one device) of the full cache and the compressed run, `token` the id the compressed run
/// chose from `comp`. One device-to-host copy. Throws c10::Error for a token outside the vocabulary.
void add_fidelity(Fidelity& f, const at::Tensor& full, const at::Tensor& comp, int32_t token);

struct GenerateResult {
  std::vector<int32_t> output_ids;                    ///< the first turn's tokens
  std::vector<std::vector<int32_t>> turn_output_ids;  ///< every turn's tokens
  at::Tensor last_logits;                             ///< fp32 [vocab] on CPU: logits at the last prompt position
  double prefill_ms = 0;
  double decode_ms = 0;
  int64_t decode_steps = 0;   ///< forward passes of one token each
  bool decode_graph = false;  ///< decode replayed a CUDA graph per step (DecodeGraph), not the eager path
  /// After prefill (and compression): true prompt positions kept, [layer][kv head] -> sorted list.
  std::vector<std::vector<std::vector<int64_t>>> kept;
  int64_t cache_bytes_live = 0;       ///< K+V bytes held after prefill (all layers and heads)
  int64_t cache_bytes_allocated = 0;  ///< including the decode reserve
  int64_t side_store_bytes = 0;       ///< decode-time policy side stores (page min/max, channel masks, ...)
  std::vector<int64_t> bytes_read;    ///< per decode step: K/V/side-store bytes attention read, all layers
  /// Sparse decode selection (HSA/Quest/SparQ/Exact-TopK) at capture full: per decode step, the mean
  /// over layers and KV heads of Timeline::recall (the share of the exact top-|selection| selected).
  std::vector<double> selection_recall;
  /// With capture on: every cache decision over time (evictions per position, selections per step).
  Timeline timeline;
  Fidelity fidelity;                   ///< filled when reference_full
  std::vector<LayerCapture> captures;  ///< per layer, when capture != kOff (first turn's prefill)
  at::Tensor topk_unique;  ///< capture full: int64 [n_layer, n_head] distinct Exact-TopK(256) picks over decode
  double decode_tokens_per_s() const { return decode_ms > 0 ? decode_steps * 1000.0 / decode_ms : 0.0; }
};

/// Token positions generate() gives `request` at most: the prompt, the question and max_new_tokens (at least
/// `min_new_tokens`), and per later turn the last token fed back, the turn and max_new_tokens again.
/// generate() sizes its caches with min_new_tokens 1; the context check counts with 0.
int64_t positions_needed(const GenerateRequest& request, int64_t min_new_tokens = 0);

/// Runs `request` on a fresh cache. `on_token` (optional) sees each emitted id as it is chosen.
GenerateResult generate(const Engine& engine, const GenerateRequest& request,
                        const std::function<void(int32_t)>& on_token = {});

/// Prompt ids for `text` with BOS handling: kAlways prepends config.bos_token_id, kAuto does so
/// when the model's tokenizer convention adds one (Model::add_bos). Throws InputError if the
/// result is empty or kAlways is asked of a model without a BOS id.
std::vector<int32_t> prompt_ids(const Model& model, const std::string& text, BosMode bos);

/// Text of `new_ids` as it reads after `context_ids` (handles tokenizers whose pieces render
/// differently at the start of a text, e.g. SentencePiece / llama2.c leading spaces). Only the last
/// 16 context tokens are decoded, so streaming a token costs the same at any context length.
std::string decode_continuation(const Tokenizer& tok, const std::vector<int32_t>& context_ids,
                                const std::vector<int32_t>& new_ids);

}  // namespace kvscope
