#include "run_options.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include "budget_check.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/utf8.h"

namespace kvscope::run {

BosMode parse_bos_mode(std::string_view text) {
  if (text == "auto") return BosMode::kAuto;
  if (text == "always") return BosMode::kAlways;
  if (text == "never") return BosMode::kNever;
  throw InputError("--bos: '" + std::string(text) + "' is not auto, always or never");
}

LoadOptions load_options(const std::string& device, const std::string& dtype, const std::string& tokenizer) {
  std::optional<c10::Device> dev;
  try {
    dev.emplace(device);
  } catch (const c10::Error&) {
    throw InputError("--device: '" + device + "' is not a device (cpu, cuda or cuda:i)");
  }
  if (!dev->is_cpu() && !dev->is_cuda())
    throw InputError("--device: '" + device + "' is not a device kvscope runs on (cpu, cuda or cuda:i)");
  if (dev->is_cpu() && dev->has_index() && dev->index() != 0)
    throw InputError("--device: '" + device + "': there is one CPU device (cpu or cpu:0)");
  if (dev->is_cuda() && !at::hasCUDA())
    throw InputError("--device " + device + ": this build of kvscope has no CUDA (LibTorch is CPU-only)");
  if (dev->is_cuda() && dev->has_index()) {
    const int64_t n = at::detail::getCUDAHooks().getNumGPUs();
    if (dev->index() < 0 || dev->index() >= n)
      throw InputError("--device " + device + ": this machine has " + std::to_string(n) + " CUDA device" +
                       (n == 1 ? "" : "s") + (n > 0 ? " (cuda:0 to cuda:" + std::to_string(n - 1) + ")" : ""));
  }
  return LoadOptions{*dev, parse_dtype(dtype), tokenizer};
}

namespace {

constexpr int64_t kMaxPromptFileBytes = int64_t{64} << 20;

/// "stories260K", "pycode-16m": the model's name for messages.
std::string model_label(const Model& model) {
  std::filesystem::path p = model.source;
  if (p.filename().empty()) p = p.parent_path();
  if (p.extension() == ".bin") return p.stem().string();
  if (p.filename() == "config.json") return p.string();
  return p.filename().string();
}

}  // namespace

std::string read_prompt_file(const std::string& path) {
  // open() + fstat() of the opened file: no gap between the checks and the read, and a symlink
  // loop or a missing file is one errno, not an exception from std::filesystem.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw InputError(path, std::string("cannot open the prompt file: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw InputError(path, std::string("cannot read the prompt file: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw InputError(path, "a directory, not a prompt file");
  if (!S_ISREG(st.st_mode))
    throw InputError(path, "not a regular file (a device, pipe or socket): give the prompt as a text file");
  if (st.st_size > kMaxPromptFileBytes)
    throw InputError(path, "the prompt file is " + std::to_string(st.st_size) + " bytes, more than the limit of " +
                               std::to_string(kMaxPromptFileBytes >> 20) + " MiB");
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw InputError(path, std::string("cannot read the prompt file: ") + std::strerror(errno));
    if (n == 0) break;  // shrank while being read
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    throw InputError(path, "not a text file: a NUL byte at offset " + std::to_string(nul) + " (of " +
                               std::to_string(text.size()) + " bytes)");
  if (const size_t bad = first_invalid_utf8(text); bad != std::string_view::npos)
    throw InputError(path, "not a text file: not valid UTF-8 at byte offset " + std::to_string(bad) + " (of " +
                               std::to_string(text.size()) + " bytes)");
  return text;
}

std::vector<std::pair<int64_t, int64_t>> parse_pinned_heads(std::string_view text) {
  std::vector<std::pair<int64_t, int64_t>> out;
  auto number = [&](std::string_view part) {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc() || end != part.data() + part.size() || v < 0 || v > (int64_t(1) << 20))
      throw InputError("--pin '" + std::string(text) + "': '" + std::string(part) +
                       "' is not a layer or KV head number (expected L:H[,L:H...], e.g. 3:1,7:0)");
    return v;
  };
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    const size_t colon = item.find(':');
    if (colon == std::string_view::npos)
      throw InputError("--pin '" + std::string(text) + "': '" + std::string(item) +
                       "' is not L:H (expected L:H[,L:H...], e.g. 3:1,7:0)");
    out.emplace_back(number(item.substr(0, colon)), number(item.substr(colon + 1)));
    start = comma + 1;
  }
  return out;
}

std::string error_message(const std::exception& e) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = torch_error ? torch_error->what_without_backtrace() : e.what();
  if (const size_t end = text.find('\n'); end != std::string::npos) text.resize(end);
  return text;
}

std::unique_ptr<Pipeline> make_pipeline(const PolicyRegistry& registry, const RunOptions& options) {
  if (options.pipeline.empty()) {
    if (options.budget) throw InputError("a budget was given without a pipeline: the full cache takes no budget");
    return nullptr;
  }
  auto pipeline = std::make_unique<Pipeline>(registry, options.pipeline);
  if (pipeline->uses_budget() && !options.budget)
    throw InputError("pipeline '" + options.pipeline + "' needs a budget: give --compression-ratio R or --budget N");
  if (!pipeline->uses_budget() && options.budget)
    throw InputError("pipeline '" + options.pipeline +
                     "' uses no budget (its stages keep what their own settings say): the budget would be unused; "
                     "drop --compression-ratio / --budget");
  if (options.budget) options.budget->validate();
  return pipeline;
}

std::vector<StageSpec> pipeline_stage_specs(const Pipeline& pipeline) {
  std::vector<StageSpec> out;
  for (const auto& p : pipeline.stages()) out.push_back({p->name(), p->params()});
  return out;
}

GenerateRequest make_request(const Model& model, const Pipeline* pipeline, const RunOptions& options) {
  GenerateRequest req;
  if (options.chat) {
    // The rendered text, encoded as apply_chat_template(tokenize=True) encodes it: the template wrote
    // the BOS where the model wants one, so no BOS mode applies and nothing is added twice.
    const std::string& source = options.chat->source;
    if (options.prompt_ids)
      throw InputError(source,
                       "a chat prompt is text rendered with this template; --prompt-ids gives token ids "
                       "verbatim: give one of them");
    if (options.bos != BosMode::kAuto)
      throw InputError(source, "a chat prompt's BOS is where this template writes it: leave --bos auto");
    if (!options.follow_up_turns.empty())
      throw InputError(source,
                       "later turns (--turn) are not rendered with the chat template: give the whole "
                       "conversation as --messages");
    if (!model.tokenizer)
      throw InputError(model.source, "the model has no tokenizer: cannot encode the chat prompt (give --tokenizer)");
    req.prompt_ids = chat_prompt_ids(*model.tokenizer, options.chat->text);
    if (req.prompt_ids.empty()) throw InputError(source, "the chat prompt rendered to no tokens");
  } else if (options.prompt_ids) {
    if (options.prompt_ids->empty()) throw InputError("--prompt-ids: the prompt holds no token ids");
    req.prompt_ids = *options.prompt_ids;
  } else if (model.tokenizer) {
    req.prompt_ids = prompt_ids(model, options.prompt_text, options.bos);
  } else if (!options.prompt_text.empty()) {
    throw InputError(model.source,
                     "the model has no tokenizer: give the prompt as token ids (--prompt-ids FILE.json) "
                     "or a tokenizer (--tokenizer)");
  } else {
    req.prompt_ids.assign(1, model.config.bos_token_id >= 0 ? model.config.bos_token_id : 0);
  }
  if (!options.follow_up_turns.empty() && !model.tokenizer)
    throw InputError(model.source, "the model has no tokenizer: cannot encode the follow-up turns");
  for (const auto& t : options.follow_up_turns) req.follow_up_turns.push_back(model.tokenizer->encode(t));
  // A token the embedding has no row for fails deep in LibTorch (an index error): a tokenizer of
  // another model (--tokenizer) or a config whose vocab_size is too small.
  const int64_t vocab = model.config.vocab_size;
  auto check_ids = [&](const std::vector<int32_t>& ids, const std::string& what, const char* why) {
    for (int32_t id : ids)
      if (id < 0 || id >= vocab)
        throw InputError(model.source, what + " has token id " + std::to_string(id) +
                                           ", but the model's vocabulary is " + std::to_string(vocab) +
                                           " tokens (ids 0 to " + std::to_string(vocab - 1) + "): " + why);
  };
  const char* wrong_tokenizer = "the tokenizer does not belong to this model";
  check_ids(req.prompt_ids, options.prompt_ids ? "the prompt (--prompt-ids)" : "the prompt",
            options.prompt_ids ? "the ids are outside the vocabulary" : wrong_tokenizer);
  for (size_t i = 0; i < req.follow_up_turns.size(); ++i)
    check_ids(req.follow_up_turns[i], "turn " + std::to_string(i + 2), wrong_tokenizer);
  req.max_new_tokens = options.max_new_tokens;
  req.sampling = options.sampling;
  req.stop_ids = model.stop_token_ids;
  req.prefill_chunk = options.prefill_chunk;
  req.pipeline = pipeline;
  if (pipeline && options.budget) req.budget = *options.budget;
  req.reference_full = options.reference_full && pipeline != nullptr;
  req.capture = options.capture;
  req.capture_window = options.capture_window;
  for (const auto& [l, h] : options.pinned_heads)
    if (l >= model.config.n_layer || h >= model.config.n_head_kv)
      throw InputError("--pin " + std::to_string(l) + ":" + std::to_string(h) + ": " + model_label(model) + " has " +
                       std::to_string(model.config.n_layer) + " layers (0 to " +
                       std::to_string(model.config.n_layer - 1) + ") of " + std::to_string(model.config.n_head_kv) +
                       " KV heads (0 to " + std::to_string(model.config.n_head_kv - 1) + ")");
  req.pinned_heads = options.pinned_heads;
  // Positions past the context the model was trained on give output that looks fine and is not
  // (RoPE goes on rotating; nothing fails): refuse unless the user asks for it.
  const int64_t needed = positions_needed(req), context = model.config.max_position_embeddings;
  if (needed > context && !options.allow_beyond_context) {
    const int64_t n_turns = static_cast<int64_t>(req.follow_up_turns.size());
    const int64_t given = needed - (n_turns + 1) * req.max_new_tokens;
    const std::string n_new = std::to_string(req.max_new_tokens);
    const std::string asked =
        n_turns == 0 ? "the prompt is " + std::to_string(given) + " tokens and --max-new-tokens " + n_new +
                           " asks for " + n_new + " more"
                     : "the prompt and " + std::to_string(n_turns) + " later turn" + (n_turns == 1 ? "" : "s") +
                           " are " + std::to_string(given) + " tokens (each turn with the token before it) and " +
                           "--max-new-tokens " + n_new + " asks for " + n_new + " more per turn";
    throw InputError(asked + ": " + std::to_string(needed) + " > " + model_label(model) + "'s context of " +
                     std::to_string(context) + " tokens; shorten the prompt, lower --max-new-tokens, or pass " +
                     "--allow-beyond-context to run past it");
  }
  // A budget below what the pipeline always keeps (SnapKV's observation window, sinks, ...) leaves
  // the scores nothing to decide: refuse it, as the GUI's Run view does (budget_check.h).
  if (pipeline && options.budget) {
    const int64_t n_prompt = static_cast<int64_t>(req.prompt_ids.size());
    const int64_t kept = pipeline->begin_run(RunBudget{*options.budget, n_prompt, req.max_new_tokens}, model.config);
    if (const KeptCheck c = check_kept_entries(pipeline_stage_specs(*pipeline), *options.budget, n_prompt, kept);
        !c.problem.empty())
      throw InputError(c.problem);
  }
  return req;
}

}  // namespace kvscope::run
