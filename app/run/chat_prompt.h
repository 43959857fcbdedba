#pragma once
// Chat prompts: messages rendered with a tokenizer's chat template and tokenized as Hugging Face
// transformers' apply_chat_template(messages, add_generation_prompt=True, tokenize=True) does. The
// one path of `kvscope-cli chat-template`, `generate` / `run` / `sweep --chat` / `--messages` and
// the GUI Run view's "chat template", so each gives the same ids. Torch-free header.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvscope/core/chat_template.h"

namespace kvscope {
class Tokenizer;
}

namespace kvscope::run {

/// A prompt rendered from chat messages.
struct ChatPrompt {
  std::string text;                 ///< the rendered text: what is tokenized (chat_prompt_ids)
  std::string source;               ///< where the template came from (ChatTemplate::source)
  nlohmann::ordered_json messages;  ///< the messages rendered
  bool operator==(const ChatPrompt&) const = default;
};

/// Where the chat template of a model's prompts is looked for, as its tokenizer is: the tokenizer
/// override when one is given (a directory, or a tokenizer file's directory), else the model (a
/// directory, or a model file's directory). Throws InputError when both are empty.
std::filesystem::path chat_template_location(const std::string& model_path, const std::string& tokenizer_path = {});

/// Renders `messages` with `tmpl` (ChatTemplate::render; `extra` and `template_name` as there).
/// Throws InputError naming the template's file and line when rendering fails.
ChatPrompt render_chat(const ChatTemplate& tmpl, const nlohmann::ordered_json& messages, bool add_generation_prompt,
                       const nlohmann::ordered_json& extra = nlohmann::ordered_json::object(),
                       const std::string& template_name = "");

/// Renders `messages` with the generation prompt (add_generation_prompt=True) under the template
/// ChatTemplate::load finds at `location` (chat_template_location). Throws InputError naming the
/// file: a tokenizer without a template ("<dir>/tokenizer_config.json: has no chat template ..."),
/// a template that does not parse or fails to render.
ChatPrompt render_chat(const std::filesystem::path& location, const nlohmann::ordered_json& messages);

/// The token ids of a rendered chat prompt: its text encoded with no special tokens added, as
/// apply_chat_template(tokenize=True). The template writes the BOS where the model wants one, so
/// nothing is added a second time (a chat prompt takes no --bos).
std::vector<int32_t> chat_prompt_ids(const Tokenizer& tokenizer, std::string_view text);

/// The messages of a --messages file: read as a prompt file is (read_prompt_file: text, at most 64
/// MiB) and parsed by parse_chat_messages. Throws InputError naming the file: missing, not JSON,
/// not a non-empty list of {"role", "content"} messages.
nlohmann::ordered_json read_chat_messages(const std::string& path);

}  // namespace kvscope::run
