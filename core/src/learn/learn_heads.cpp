#include "kvscope/core/learn/learn_heads.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "kvscope/core/errors.h"
#include "kvscope/core/learn/pattern_budget.h"
#include "trainers.h"

namespace kvscope::learn {
namespace {

std::string fmt(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

double dense_fraction_of(const LearnOptions& o) {
  return o.dense_fraction >= 0 ? o.dense_fraction : std::max(0.0, o.budget - 0.05);
}

int64_t reference_length_of(const LearnOptions& o) { return o.reference_length > 0 ? o.reference_length : o.seq_len; }

std::vector<int64_t> candidate_windows(const LearnOptions& o) {
  std::vector<int64_t> c;
  for (int64_t i = 1; i <= o.n_candidates; ++i) c.push_back(i * o.block);
  return c;
}

}  // namespace

LearnMethod parse_learn_method(const std::string& name) {
  if (name == "hs-sft") return LearnMethod::kHsSft;
  if (name == "duo") return LearnMethod::kDuo;
  throw InputError("unknown --method '" + name + "' (expected hs-sft or duo)");
}

std::string learn_method_name(LearnMethod m) { return m == LearnMethod::kHsSft ? "hs-sft" : "duo"; }

StreamingSizes default_streaming_sizes(int64_t n, int64_t context) {
  if (context >= kPaperContext || n >= kPaperContext) return {kPaperSink, kPaperWindow, kPaperBlock};
  const auto scaled = [n](int64_t paper) {
    return std::max<int64_t>(1, std::llround(static_cast<double>(paper) * static_cast<double>(n) / kPaperContext));
  };
  return {scaled(kPaperSink), scaled(kPaperWindow), scaled(kPaperBlock)};
}

LearnOptions resolve_defaults(const LearnOptions& given, const ModelConfig& c) {
  LearnOptions o = given;
  if (o.seq_len == 0) o.seq_len = std::min<int64_t>(kDefaultSeqLen, c.max_position_embeddings);
  const StreamingSizes d = default_streaming_sizes(reference_length_of(o), c.max_position_embeddings);
  if (o.sink < 0) o.sink = d.sink;
  if (o.window < 0) o.window = d.window;
  if (o.block < 0) o.block = d.block;
  return o;
}

void validate(const LearnOptions& given, const ModelConfig& c) {
  const LearnOptions o = resolve_defaults(given, c);
  if (!(o.budget > 0 && o.budget <= 1))
    throw InputError("--budget " + fmt(o.budget) + ": must be a fraction in (0, 1] of the full KV cache kept");
  if (o.steps < 1) throw InputError("--steps must be >= 1, got " + std::to_string(o.steps));
  if (o.batch < 1) throw InputError("--batch must be >= 1, got " + std::to_string(o.batch));
  if (o.seq_len < 2) throw InputError("--seq-len must be >= 2, got " + std::to_string(o.seq_len));
  if (o.seq_len > c.max_position_embeddings)
    throw InputError("--seq-len " + std::to_string(o.seq_len) + " is beyond the model's context of " +
                     std::to_string(c.max_position_embeddings) + " tokens");
  if (o.reference_length < 0) throw InputError("--reference-length must be >= 1 (or 0 for --seq-len)");
  if (!(o.lr >= 0)) throw InputError("--lr must be > 0 (or 0 for the method's default)");
  if (!(o.tau > 0)) throw InputError("--tau must be > 0");
  if (o.method == LearnMethod::kDuo) {
    if (o.window < 1) throw InputError("--window must be >= 1, got " + std::to_string(o.window));
    if (o.seq_len <= o.sink + o.window)
      throw InputError("--seq-len " + std::to_string(o.seq_len) + " is not longer than --sink + --window (" +
                       std::to_string(o.sink + o.window) + "): streaming heads would drop nothing to learn from");
  } else {
    if (o.block < 1) throw InputError("--block must be >= 1, got " + std::to_string(o.block));
    if (o.n_candidates < 1) throw InputError("--candidates must be >= 1, got " + std::to_string(o.n_candidates));
    if (o.dense_fraction > 1) throw InputError("--dense-fraction must be in [0, 1]");
    if (o.seq_len <= o.sink + o.block)
      throw InputError("--seq-len " + std::to_string(o.seq_len) + " is not longer than --sink + --block (" +
                       std::to_string(o.sink + o.block) + "): streaming heads would drop nothing to learn from");
  }
  // Fail before reading data or training when no pattern of the method can meet the budget (the
  // threshold / rescaling below throw naming the sizes).
  const std::vector<std::vector<double>> ones(c.n_layer, std::vector<double>(c.n_head_kv, 1.0));
  const int64_t n = reference_length_of(o);
  if (o.method == LearnMethod::kDuo)
    threshold_gates(ones, o.budget, n, o.sink, o.window);
  else
    rescale_windows(choose_dense_heads(ones, dense_fraction_of(o)), std::vector<int64_t>(c.n_layer, o.block), o.sink,
                    o.budget, n);
}

LearnResult learn_head_pattern(const Model& model, const std::string& glob, const LearnOptions& given,
                               const LearnProgress& progress) {
  validate(given, model.config);
  const LearnOptions o = resolve_defaults(given, model.config);
  TrainingDataOptions d;
  d.seq_len = o.seq_len;
  d.seed = o.seed;
  const int64_t all_steps =
      o.steps +
      (o.method == LearnMethod::kHsSft ? std::max<int64_t>(0, o.init_steps < 0 ? o.steps / 2 : o.init_steps) : 0);
  d.max_tokens = o.max_tokens > 0 ? o.max_tokens : std::max<int64_t>(all_steps, 4) * o.batch * o.seq_len;
  return learn_head_pattern(model, load_training_data(glob, model, d), o, progress);
}

LearnResult learn_head_pattern(const Model& model, const TrainingData& data, const LearnOptions& given,
                               const LearnProgress& progress) {
  const ModelConfig& c = model.config;
  validate(given, c);
  const LearnOptions o = resolve_defaults(given, c);
  if (data.sequences.dim() != 2 || data.sequences.size(1) != o.seq_len)
    throw InputError("learn-heads: training sequences are not [n, " + std::to_string(o.seq_len) + "]");
  LearnResult r;
  r.options = o;
  r.reference_length = reference_length_of(o);
  r.n_files = static_cast<int64_t>(data.files.size());
  r.n_tokens = data.n_tokens;
  r.n_sequences = data.sequences.size(0);
  const std::vector<std::vector<double>> ones(c.n_layer, std::vector<double>(c.n_head_kv, 1.0));
  const double alpha = dense_fraction_of(o);

  // Pattern learning never updates the weights, and autograd must be on even if a caller is in no-grad.
  c10::AutoGradMode grad_on(true);
  TrainingForward forward(model);
  Minibatches batches(data.sequences, o.batch, o.seed, model.device);
  TrainContext ctx{forward, batches, o, r.curve, progress, 0};
  const double duo_lambda = o.method == LearnMethod::kDuo && o.lambda >= 0 ? o.lambda : 0.05;
  if (o.method == LearnMethod::kDuo) {
    PhaseResult g = train_duo_gates(ctx, o.steps, o.sink, o.window, o.lr > 0 ? o.lr : 0.02, duo_lambda);
    r.gates = g.values;
    r.initial_loss = g.initial_loss;
    r.final_loss = g.final_loss;
    r.initial_task_loss = g.initial_task_loss;
    r.final_task_loss = g.final_task_loss;
    r.pattern = threshold_gates(r.gates, o.budget, r.reference_length, o.sink, o.window);
  } else {
    r.candidates = candidate_windows(o);
    const int64_t init_steps = o.init_steps < 0 ? o.steps / 2 : o.init_steps;
    // Algorithm 1 line 1: dense heads = top-alpha by DuoAttention gates, trained here against the
    // tightest candidate window (the heads that most need more than it rank highest).
    if (alpha > 0 && init_steps > 0)
      r.gates = train_duo_gates(ctx, init_steps, o.sink, o.block, 0.02, 0.05).values;
    else
      r.gates = ones;
    r.dense = choose_dense_heads(r.gates, alpha);
    PhaseResult w = train_hs_sft_windows(ctx, o.steps, r.dense, r.candidates, o.sink, o.lr > 0 ? o.lr : 0.01,
                                         o.lambda >= 0 ? o.lambda : 1e-2);
    r.window_probs = w.values;
    for (int64_t i : w.argmax) r.learned_windows.push_back(r.candidates[i]);
    r.initial_loss = w.initial_loss;
    r.final_loss = w.final_loss;
    r.initial_task_loss = w.initial_task_loss;
    r.final_task_loss = w.final_task_loss;
    r.pattern = rescale_windows(r.dense, r.learned_windows, o.sink, o.budget, r.reference_length);
  }
  r.pattern.budget = o.budget;
  r.budget_achieved = kept_fraction(r.pattern, r.reference_length);
  return r;
}

}  // namespace kvscope::learn
