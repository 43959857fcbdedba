// kvscope-cli chat-template: chat messages rendered with a tokenizer's chat template as Hugging
// Face transformers' apply_chat_template renders them, and the text's token ids (README "CLI").
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat_prompt.h"
#include "commands.h"
#include "kvscope/core/chat_template.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/tokenizer.h"
#include "run_options.h"

namespace kvscope::cli {
namespace {

using ojson = nlohmann::ordered_json;

struct Args {
  std::string tokenizer, messages, vars, template_name;
  bool add_generation_prompt = false;
  bool json = false;
};

/// A JSON file (UTF-8 text, at most 64 MiB) in file order. Throws InputError naming it.
ojson read_json_arg(const std::string& path) {
  const std::string text = run::read_prompt_file(path);
  try {
    return ojson::parse(text);
  } catch (const ojson::parse_error& e) {
    throw InputError(path, std::string("not valid JSON: ") + e.what());
  }
}

}  // namespace

Runner add_chat_template(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "chat-template", "Render chat messages with a tokenizer's chat template, as transformers' apply_chat_template");
  auto a = std::make_shared<Args>();
  cmd->add_option("--tokenizer", a->tokenizer,
                  "A directory holding tokenizer.json + tokenizer_config.json (and chat_template.jinja), or its "
                  "tokenizer_config.json")
      ->required();
  cmd->add_option("--messages", a->messages, "A JSON file: an array of {\"role\", \"content\", ...} messages")
      ->required();
  cmd->add_flag("--add-generation-prompt", a->add_generation_prompt,
                "End with the template's prompt for the assistant's reply (add_generation_prompt=True)");
  cmd->add_option("--vars", a->vars,
                  "A JSON file: an object of extra template variables (tools, documents, enable_thinking, ...)");
  cmd->add_option("--template", a->template_name, "Which of several named templates (default: as transformers)");
  cmd->add_flag("--json", a->json,
                "Print {\"text\": ..., \"ids\": [...]}: the ids encode the text without adding special tokens "
                "(apply_chat_template(tokenize=True)); default: the text alone");
  return [a]() {
    const ChatTemplate tmpl = ChatTemplate::load(a->tokenizer);
    const ojson messages = run::read_chat_messages(a->messages);
    ojson vars = ojson::object();
    if (!a->vars.empty()) {
      vars = read_json_arg(a->vars);
      if (!vars.is_object()) throw InputError(a->vars, "expected a JSON object of template variables");
    }
    // The same rendering and ids as generate / run / sweep --chat / --messages (run/chat_prompt.h).
    const run::ChatPrompt chat = run::render_chat(tmpl, messages, a->add_generation_prompt, vars, a->template_name);
    if (!a->json) {
      std::cout << chat.text;
      return 0;
    }
    const std::vector<int32_t> ids =
        run::chat_prompt_ids(*load_tokenizer(run::chat_template_location("", a->tokenizer)), chat.text);
    std::cout << ojson{{"text", chat.text}, {"ids", ids}}.dump(-1, ' ', false, ojson::error_handler_t::replace) << "\n";
    return 0;
  };
}

}  // namespace kvscope::cli
