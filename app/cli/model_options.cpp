#include "model_options.h"

#include <limits>

#include <nlohmann/json.hpp>

#include "kvscope/core/errors.h"
#include "kvscope/core/tokenizer.h"
#include "number_check.h"

namespace kvscope::cli {
namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

void ModelOptions::add_to(CLI::App& cmd) {
  auto* m = cmd.add_option("--model", model, "Model: Hugging Face directory or llama2.c .bin");
  auto* r =
      cmd.add_option("--random-init", random_init, "config.json: random weights of that shape, built on the device");
  m->excludes(r);
  cmd.add_option("--tokenizer", tokenizer, "Tokenizer file overriding the model's own");
  auto* p = cmd.add_option("--prompt", prompt, "Prompt text");
  auto* pf = cmd.add_option("--prompt-file", prompt_file, "File holding the prompt text");
  auto* pi = cmd.add_option("--prompt-ids", prompt_ids_file,
                            "JSON file holding the prompt as a list of token ids (used verbatim: no BOS added)");
  p->excludes(pf);
  pi->excludes(p)->excludes(pf);
  cmd.add_flag("--chat", chat,
               "Render the prompt as one user message with the model's chat template (and its generation "
               "prompt), tokenized as transformers' apply_chat_template(tokenize=True): no BOS added");
  cmd.add_option("--system", system, "With --chat: a system message before the prompt");
  cmd.add_option("--messages", messages_file,
                 "JSON file: a list of {\"role\", \"content\"} messages, rendered as --chat renders one (instead of "
                 "--prompt)");
  cmd.add_option("--turn", turns, "A later user turn (repeat for several): generation continues on the same cache");
  cmd.add_option("--bos", bos, "Prepend the model's BOS: auto (tokenizer convention) | always | never")
      ->check(CLI::IsMember({"auto", "always", "never"}));
  cmd.add_option("--max-new-tokens", max_new_tokens, "Tokens to generate")->check(finite_number(0, 1e9));
  auto* g = cmd.add_flag("--greedy", greedy, "Greedy decoding (the default unless --temperature is given)");
  cmd.add_option("--temperature", temperature, "Sampling temperature (> 0; 0 = greedy)")
      ->check(finite_number(0, kInf, false, /*hi_open=*/true))
      ->excludes(g);
  cmd.add_option("--top-p", top_p, "Nucleus sampling mass in (0, 1]")->check(finite_number(0, 1, /*lo_open=*/true));
  cmd.add_option("--seed", seed, "Sampling seed");
  cmd.add_option("--device", device, "cpu | cuda | cuda:i");
  cmd.add_option("--dtype", dtype, "fp32 | bf16 | fp16")->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd.add_option("--prefill-chunk", prefill_chunk, "Prefill in blocks of this many tokens (0 = whole prompt)")
      ->check(finite_number(0, 1e12));
  cmd.add_flag("--allow-beyond-context", allow_beyond_context,
               "Run even if the prompt and --max-new-tokens go past the model's context (max_position_embeddings); "
               "recorded with the run");
  cmd.add_flag("--dump-last-logits", dump_last_logits, "Include float32 logits at the last prompt position");
  cmd.add_flag("--json", json, "Print one JSON object");
}

Model ModelOptions::load() const {
  if (model.empty() && random_init.empty()) throw InputError("give --model PATH or --random-init CONFIG.json");
  const LoadOptions o = run::load_options(device, dtype, tokenizer);
  if (random_init.empty()) return load_model(model, o);
  Model m = random_init_model(random_init, o, seed);
  if (!tokenizer.empty()) m.tokenizer = load_tokenizer(tokenizer);  // --tokenizer encodes the prompt
  return m;
}

std::string ModelOptions::prompt_text() const {
  return prompt_file.empty() ? prompt : run::read_prompt_file(prompt_file);
}

namespace {

/// The token ids of a --prompt-ids file: a JSON list of integers. Throws InputError naming the file.
std::vector<int32_t> read_prompt_ids(const std::string& path) {
  const std::string text = run::read_prompt_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path, std::string("not JSON: ") + e.what());
  }
  if (!j.is_array()) throw InputError(path, "expected a JSON list of token ids");
  std::vector<int32_t> ids;
  for (const auto& v : j) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max())
      throw InputError(path, "entry " + std::to_string(ids.size()) + " is not a token id (" + v.dump() + ")");
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

/// The flags of a chat prompt that cannot go together, each refused in one line (naming the file).
void check_chat_options(const ModelOptions& o) {
  const bool messages = !o.messages_file.empty();
  if (o.system && !o.chat) {
    if (messages)
      throw InputError(o.messages_file,
                       "--system goes with --chat; with --messages, put the system message first "
                       "in this file");
    throw InputError("--system without --chat: a system message goes before a chat prompt (add --chat)");
  }
  if (messages && o.chat)
    throw InputError(o.messages_file,
                     "--chat and --messages: give the prompt as --chat --prompt TEXT, or the whole "
                     "conversation as --messages");
  if (messages && (!o.prompt.empty() || !o.prompt_file.empty() || !o.prompt_ids_file.empty()))
    throw InputError(o.messages_file, "--messages is the whole prompt: drop --prompt / --prompt-file / --prompt-ids");
  if (o.chat && !o.prompt_ids_file.empty())
    throw InputError(o.prompt_ids_file,
                     "--chat renders a text prompt with the chat template, --prompt-ids gives "
                     "token ids used verbatim: give one of them");
  if (o.chat && o.prompt.empty() && o.prompt_file.empty())
    throw InputError("--chat: give the user message as --prompt TEXT or --prompt-file FILE");
  const std::string what = messages ? "--messages" : "--chat";
  if ((o.chat || messages) && o.bos != "auto")
    throw InputError("--bos " + o.bos + " with " + what +
                     ": a chat prompt's BOS is where its template writes it: leave --bos auto");
  if ((o.chat || messages) && !o.turns.empty())
    throw InputError("--turn with " + what +
                     ": later turns are not rendered with the chat template; give the whole conversation as "
                     "--messages");
}

}  // namespace

run::RunOptions ModelOptions::run_options() const {
  check_chat_options(*this);
  run::RunOptions r;
  r.prompt_text = prompt_text();
  if (!prompt_ids_file.empty()) r.prompt_ids = read_prompt_ids(prompt_ids_file);
  if (chat || !messages_file.empty()) {
    // Rendered before the model loads: a missing template or a bad messages file costs nothing.
    const nlohmann::ordered_json messages =
        chat ? user_chat_messages(r.prompt_text, system) : run::read_chat_messages(messages_file);
    r.chat = run::render_chat(run::chat_template_location(model, tokenizer), messages);
    r.prompt_text = r.chat->text;
  }
  r.follow_up_turns = turns;
  r.bos = run::parse_bos_mode(bos);
  r.max_new_tokens = max_new_tokens;
  r.sampling = sampling();
  r.prefill_chunk = prefill_chunk;
  r.allow_beyond_context = allow_beyond_context;
  return r;
}

SamplingParams ModelOptions::sampling() const {
  SamplingParams s;
  s.greedy = greedy || temperature == 0;
  s.temperature = temperature > 0 ? temperature : 1.0;
  s.top_p = top_p;
  s.seed = seed;
  return s;
}

}  // namespace kvscope::cli
