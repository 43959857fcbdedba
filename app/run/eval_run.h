#pragma once
// One evaluation sample under one pipeline and budget: the prompt fed question-agnostic or
// question-aware, greedy decoding, the score, how much of the needle each head kept, and (with a
// session store) the run recorded with its sample. What `kvscope-cli eval` runs per item.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "eval_prompt.h"
#include "kvscope/core/budget.h"
#include "kvscope/core/capture.h"
#include "kvscope/core/engine.h"
#include "kvscope/core/eval_sample.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/sessions/session_store.h"

namespace kvscope::run {

/// What a pipeline compresses (docs/eval.md "Question-agnostic and question-aware").
enum class QuestionMode {
  kAgnostic,  ///< the context alone; the question follows uncompressed (kvpress's pipeline)
  kAware,     ///< the whole prompt, question included (the papers' usual setting)
};

/// "question-agnostic" | "question-aware".
std::string_view question_mode_name(QuestionMode mode);

/// The tokens a pipeline compresses for `p` in `mode`: question-agnostic, the context (the prompt
/// up to its question_start, when the prompt has a question part after some context); else the
/// whole prompt. What a shared prefill (EvalItem::shared) must hold.
std::vector<int32_t> compressed_prompt(const EvalPrompt& p, QuestionMode mode);

/// The outcome of one sample.
struct EvalRunResult {
  std::vector<int32_t> output_ids;  ///< greedy tokens, the stop token not included
  std::string output;               ///< their text
  double score = 0;                 ///< the sample's metric on `output`, in [0, 1]; with turns, the mean over them
  /// A multi-turn sample (EvalSample::turns): every turn's output text and score, the first included.
  std::vector<std::string> turn_outputs;
  std::vector<double> turn_scores;
  /// Per (layer, KV head), row-major [n_layer * n_head_kv]: the share of needle tokens
  /// (EvalPrompt::needle_ids) still in the cache after the prefill and compression; empty when
  /// the sample has no needle.
  std::vector<float> needle_kept;
  /// Full cache with a store and a needle only (else empty): needle_attention_share of the prompt
  /// and output_ids from the question on, [n_layer * n_head_kv] row-major (blob "needle_attention").
  std::vector<float> needle_attention;
  int64_t run_id = -1;  ///< the recorded run (-1 without a store)
  /// Where the item's time went, in ms of wall time: generate() in all (prefill_ms and decode_ms
  /// are GenerateResult's: the prefill or the compression of the shared one plus the question, and
  /// the decode steps; the rest of generate_ms is setting up, e.g. copying the shared cache and
  /// capturing the decode graph), and recording the run in the store (0 without one).
  struct Timing {
    double generate_ms = 0, prefill_ms = 0, decode_ms = 0, record_ms = 0;
  } timing;
};

/// One evaluation item.
struct EvalItem {
  const EvalSample* sample = nullptr;
  const EvalPrompt* prompt = nullptr;
  const Pipeline* pipeline = nullptr;  ///< null: the full cache
  std::optional<BudgetSpec> budget;    ///< with a pipeline that uses one
  QuestionMode mode = QuestionMode::kAgnostic;
  /// With a pipeline: compressed_prompt(*prompt, mode) already prefilled (prefill once, compress
  /// many); null: the item prefills on its own.
  const SharedPrefill* shared = nullptr;
};

/// Runs `item` on `engine`: greedy decoding to the sample's max_new_tokens or a stop id of the
/// model, the pipeline compressing the context (question-agnostic) or the whole prompt
/// (question-aware). A sample's later turns follow on the same cache (EvalPrompt::turn_ids, each
/// decoded to max_new_tokens too), the pipeline compressing again with each turn's block (an
/// evicting method keeps what it kept; RocketKV-MT reselects from the whole history). With `store`, the run is recorded
/// as `run` records one (session_record.h, at `capture`), under `name` and `sweep_key`, plus the summary "eval_score",
/// the blob "eval_sample" (u8: the sample as JSON with the mode and question_start), "needle_tokens" (i64 [n, 2]: token
/// ranges) and "needle_kept" (f32 [n_layer, n_head_kv]); for the full cache (no pipeline) of a
/// sample with a needle also "needle_attention" (f32 [n_layer, n_head_kv], needle_attention_share
/// of the prompt + output from question_start on: one more forward of prompt + output). The question
/// mode does not change the full cache's item (it compresses nothing) nor this blob. Throws
/// InputError for a prompt past the model's context or a budget that keeps fewer entries than the
/// pipeline always keeps.
EvalRunResult run_eval_item(const Engine& engine, const PolicyRegistry& registry, const EvalItem& item,
                            sessions::SessionStore* store, const std::string& name,
                            const std::optional<std::string>& sweep_key, CaptureLevel capture);

/// The share of `needles` (token ranges) in each head's `kept` positions, [layer][head] flattened
/// row-major; empty when `needles` covers no token.
std::vector<float> needle_kept_share(const std::vector<std::vector<std::vector<int64_t>>>& kept,
                                     const std::vector<TextSpan>& needles);

/// The attention the question and answer steps pay the needle under the full cache. `ids`: the
/// whole sequence, prompt then the generated tokens; queries: the positions [first_query, n) of
/// ids (n = ids.size(); first_query clamped into [0, n - 1]), i.e. with first_query =
/// EvalPrompt::question_start the question part (question, end of turn, answer prefix; its last
/// query chose the first answer token) and every generated token (the last one's query included,
/// though decoding needs it only to emit a stop token). One prefill of `ids` on a fresh, uncompressed cache; in each
/// layer, for each of those W = n - first_query query positions t and each query head, the model's attention
/// probabilities over the keys at positions 0..t (softmax of q·k times the model's logit scale,
/// 1/sqrt(head_dim) unless the config sets one, with its soft-capping and sliding window, as the
/// engine's attention computes them, in fp32 from the post-RoPE queries and cached keys), summed
/// over the needle positions (the union of `needles`' token ranges [begin, end); positions outside
/// [0, n) are never attended). Returns fp32 [n_layer * n_head_kv] row-major (layer major): per
/// (layer, KV head) the mean over the W queries and the G = n_head / n_head_kv query heads of its
/// GQA group of that needle mass: the mean over the question + answer steps of the share of
/// attention spent on needle tokens, in [0, 1] (the complement went to every other token, the
/// question and answer included). Empty when `needles` cover no token. Throws InputError for an
/// empty `ids` or one past the model's vocabulary.
std::vector<float> needle_attention_share(const Engine& engine, const std::vector<int32_t>& ids, int64_t first_query,
                                          const std::vector<TextSpan>& needles);

}  // namespace kvscope::run
