#include "chat_prompt.h"

#include "kvscope/core/errors.h"
#include "kvscope/core/tokenizer.h"
#include "run_options.h"

namespace kvscope::run {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

fs::path chat_template_location(const std::string& model_path, const std::string& tokenizer_path) {
  const std::string& path = !tokenizer_path.empty() ? tokenizer_path : model_path;
  if (path.empty()) throw InputError("a chat prompt needs a model or a tokenizer (--tokenizer) with a chat template");
  std::error_code ec;
  if (fs::is_directory(path, ec)) return path;
  const fs::path p(path);
  return p.has_parent_path() ? p.parent_path() : fs::path(".");
}

ChatPrompt render_chat(const ChatTemplate& tmpl, const ojson& messages, bool add_generation_prompt, const ojson& extra,
                       const std::string& template_name) {
  ChatPrompt out;
  out.text = tmpl.render(messages, add_generation_prompt, extra, template_name);
  out.source = tmpl.source(extra, template_name);
  out.messages = messages;
  return out;
}

ChatPrompt render_chat(const fs::path& location, const ojson& messages) {
  return render_chat(ChatTemplate::load(location), messages, /*add_generation_prompt=*/true);
}

std::vector<int32_t> chat_prompt_ids(const Tokenizer& tokenizer, std::string_view text) {
  return tokenizer.encode(text);  // no encode_with_special: the template placed the special tokens
}

ojson read_chat_messages(const std::string& path) { return parse_chat_messages(read_prompt_file(path), path); }

}  // namespace kvscope::run
