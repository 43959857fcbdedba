#pragma once
// Options shared by every subcommand that runs a model (generate, run, sweep).
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "kvscope/core/generate.h"
#include "kvscope/core/model.h"
#include "run_options.h"

namespace kvscope::cli {

struct ModelOptions {
  std::string model, random_init, tokenizer, prompt, prompt_file, prompt_ids_file, bos = "auto", device = "cpu",
                                                                                   dtype = "fp32";
  std::vector<std::string> turns;  ///< later user turns (multi-turn), each a text
  /// --chat: the prompt is one user message rendered with the model's chat template (after
  /// --system's system message when given); --messages FILE.json: a conversation rendered so.
  bool chat = false;
  std::optional<std::string> system;
  std::string messages_file;
  int64_t max_new_tokens = 64, prefill_chunk = 0;
  bool greedy = false, dump_last_logits = false, json = false, allow_beyond_context = false;
  double temperature = 0, top_p = 1.0;
  uint64_t seed = 0;

  /// Registers --model/--random-init, --prompt/--prompt-file, --bos, sampling, --device, --dtype, ...
  void add_to(CLI::App& cmd);
  /// Loads the model (or builds the random one) on the requested device/dtype. Throws InputError.
  Model load() const;
  /// Prompt text from --prompt or --prompt-file. Throws InputError for a file that cannot be read or
  /// is not text (run::read_prompt_file).
  std::string prompt_text() const;
  SamplingParams sampling() const;
  /// The run these options describe (prompt, turns, BOS, sampling, lengths; no pipeline). A chat
  /// prompt (--chat, --messages) is rendered here, before any model loads. Throws InputError naming
  /// the file for a --messages file that is missing, not JSON or not a list of messages, a tokenizer
  /// without a chat template, and for --chat with --prompt-ids, --system without --chat, --messages
  /// beside another prompt, a chat prompt with --turn or --bos other than auto.
  run::RunOptions run_options() const;
};

}  // namespace kvscope::cli
