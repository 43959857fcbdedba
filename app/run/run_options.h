#pragma once
// One run as its user states it - in `kvscope-cli run` / `generate` flags, a sweep grid point or the
// GUI's Run window - and the one place that turns it into a pipeline, a model load and a
// GenerateRequest. The CLI, sweeps and the GUI's run worker all call these (kvscope_run), so a run
// means the same thing whichever front end started it.
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat_prompt.h"
#include "kvscope/core/budget.h"
#include "kvscope/core/capture.h"
#include "kvscope/core/generate.h"
#include "kvscope/core/model.h"
#include "kvscope/core/pipeline.h"
#include "kvscope/core/sampling.h"

namespace kvscope::run {

/// "auto" | "always" | "never". Throws InputError("--bos: ...") for anything else.
BosMode parse_bos_mode(std::string_view text);

/// Where and how to load a model: device "cpu" | "cuda" | "cuda:i", dtype "fp32" | "bf16" | "fp16",
/// an optional tokenizer file overriding the model's own. Throws InputError naming the option for
/// an unparsable device or dtype, or a CUDA device in a build without CUDA.
LoadOptions load_options(const std::string& device, const std::string& dtype, const std::string& tokenizer = {});

/// What one run is asked to do, in the user's terms.
struct RunOptions {
  std::string prompt_text;
  /// The prompt as token ids, used verbatim (no BOS added) instead of encoding prompt_text: for a
  /// checkpoint without a tokenizer, or to feed exactly what another tool tokenized.
  std::optional<std::vector<int32_t>> prompt_ids;
  /// A chat prompt (--chat, --messages, the Run view's "chat template"): messages rendered with the
  /// tokenizer's chat template (render_chat). prompt_text holds the same rendered text; its ids are
  /// chat_prompt_ids (no BOS added: the template writes it), and the session records the template's
  /// source and the messages. Takes neither prompt_ids, follow-up turns nor a BOS mode but auto.
  std::optional<ChatPrompt> chat;
  std::vector<std::string> follow_up_turns;  ///< later user turns (multi-turn), each a text
  BosMode bos = BosMode::kAuto;
  std::string pipeline;              ///< pipeline SPEC (presets allowed); empty: the full cache
  std::optional<BudgetSpec> budget;  ///< needed by a pipeline that uses one, refused by one that does not
  int64_t max_new_tokens = 64;
  SamplingParams sampling;
  bool reference_full = false;  ///< also decode with the full cache: per-step KL and top-1 agreement
  CaptureLevel capture = CaptureLevel::kOff;
  int64_t capture_window = 32;
  /// (layer, KV head) pairs whose decode-time selections the timeline records per token.
  std::vector<std::pair<int64_t, int64_t>> pinned_heads;
  int64_t prefill_chunk = 0;  ///< prefill in blocks of this many tokens; 0 = the whole prompt
  /// Let the prompt, the turns and max_new_tokens go past the model's context
  /// (max_position_embeddings, llama2.c seq_len); refused by make_request without it.
  bool allow_beyond_context = false;
};

/// "L:H[,L:H...]" (layer and KV head, 0-based) as pairs. Throws InputError("--pin: ...") for
/// anything else.
std::vector<std::pair<int64_t, int64_t>> parse_pinned_heads(std::string_view text);

/// The text of a prompt file. Throws InputError naming the file, in one line, for a file that cannot
/// be opened (missing, a symlink loop, no permission), a directory, something not a regular file
/// (/dev/zero, a FIFO), a file over 64 MiB, or one that is not text (a NUL byte, invalid UTF-8).
std::string read_prompt_file(const std::string& path);

/// The message of `e` for a person, in one line: a LibTorch error (c10::Error) without the stack
/// trace its what() carries (7-33 lines), any other message up to its first line break.
std::string error_message(const std::exception& e);

/// The pipeline of `options` built with `registry` (null for the full cache), its budget checked:
/// InputError for a bad SPEC, a pipeline that uses a budget given none ("give --compression-ratio R
/// or --budget N"), a budget given to a pipeline that uses none (a head pattern or channel pruning
/// alone: the budget would be silently unused), or a budget outside its unit's range. Call it
/// before loading a model, so a typo costs nothing.
std::unique_ptr<Pipeline> make_pipeline(const PolicyRegistry& registry, const RunOptions& options);

/// The stages of `pipeline` with their resolved parameters (for check_kept_entries).
std::vector<StageSpec> pipeline_stage_specs(const Pipeline& pipeline);

/// The request of `options` for `model` under `pipeline` (from make_pipeline; may be null): prompt
/// tokens (BOS per options.bos; a chat prompt's chat_prompt_ids; a model without a tokenizer gets
/// its BOS id alone), follow-up turns,
/// sampling, stop tokens, budget, reference, capture and prefill chunking. Throws InputError for a
/// model without a tokenizer given follow-up turns, a token id the model has no embedding for (a
/// tokenizer of another model), a chat prompt with prompt ids, follow-up turns or a BOS mode other
/// than auto (or for a model without a tokenizer), and a run longer than the model's context (positions_needed >
/// max_position_embeddings) unless options.allow_beyond_context, with the numbers, and a pinned head
/// outside the model; and a budget whose entries per KV head after prefill (Pipeline::begin_run)
/// are fewer than the pipeline always keeps (check_kept_entries: "budget fraction 0.25 keeps 22
/// entries per KV head of the 88-token prompt, fewer than the 32 that snapkv window=32 always keeps").
GenerateRequest make_request(const Model& model, const Pipeline* pipeline, const RunOptions& options);

}  // namespace kvscope::run
