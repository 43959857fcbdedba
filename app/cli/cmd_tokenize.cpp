// kvscope-cli tokenize: the token ids of a text under a tokenizer (README "CLI"), as Hugging Face
// gives them: a directory with tokenizer.json (+ tokenizer_config.json), or a tokenizer file.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "kvscope/core/errors.h"
#include "kvscope/core/tokenizer.h"
#include "run_options.h"

namespace kvscope::cli {
namespace {

struct Args {
  std::string tokenizer, text, text_file;
  bool add_special = false;
  bool json = false;
};

}  // namespace

Runner add_tokenize(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "Token ids of a text, exactly as Hugging Face's tokenizer gives them");
  auto a = std::make_shared<Args>();
  cmd->add_option("--tokenizer", a->tokenizer,
                  "A directory holding tokenizer.json (+ tokenizer_config.json), or the tokenizer file itself "
                  "(tokenizer.json, SentencePiece .model, llama2.c tok*.bin)")
      ->required();
  auto* text = cmd->add_option("--text", a->text, "The text");
  auto* file = cmd->add_option("--text-file", a->text_file, "A file holding the text (UTF-8)");
  text->excludes(file);
  cmd->add_flag(
      "--add-special", a->add_special,
      "Add the tokenizer's special tokens (its post-processor, e.g. BOS), as encode(add_special_tokens=True)");
  cmd->add_flag("--json", a->json, "Print {\"ids\": [...]} (default: the ids separated by spaces)");
  return [a, text, file]() {
    if (text->count() == 0 && file->count() == 0) throw InputError("tokenize: give --text TEXT or --text-file FILE");
    const std::string input = a->text_file.empty() ? a->text : run::read_prompt_file(a->text_file);
    const auto tokenizer = load_tokenizer(a->tokenizer);
    const std::vector<int32_t> ids = a->add_special ? tokenizer->encode_with_special(input) : tokenizer->encode(input);
    if (a->json) {
      std::cout << nlohmann::json{{"ids", ids}}.dump() << "\n";
    } else {
      std::string line;
      for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
      std::cout << line << "\n";
    }
    return 0;
  };
}

}  // namespace kvscope::cli
