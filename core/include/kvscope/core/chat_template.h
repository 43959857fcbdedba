#pragma once
// Chat templates: a model's Jinja chat template rendered as Hugging Face transformers'
// apply_chat_template renders it (Jinja2's ImmutableSandboxedEnvironment with trim_blocks,
// lstrip_blocks and loop controls; transformers' tojson, raise_exception and strftime_now; the
// tokenizer's special tokens as variables). Torch-free (library kvscope_chat).
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvscope/core/errors.h"

namespace kvscope {

/// A tokenizer's chat template(s), parsed once; rendering is thread-safe.
///
/// The renderer implements the part of Jinja 3 that chat templates use: if/elif/else, for (with
/// loop.*, tuple targets, a filter, else), set (names, tuples, namespace attributes, blocks),
/// macros, break/continue, with, filter blocks, transformers' {% generation %}; Python's
/// operators, slices and the str/dict/list methods templates call; Jinja's filters and tests. A
/// construct outside that subset fails when the template is loaded (tags, filters, tests) or
/// rendered (methods, operands) with "<file>: line N: unsupported construct: <what>".
/// ChatTemplate::load's error for a tokenizer that has no chat template at all (as opposed to a
/// broken one): callers that fall back to plain prompts catch this type alone.
class NoChatTemplate : public InputError {
 public:
  using InputError::InputError;
};

class ChatTemplate {
 public:
  /// Loads the chat template of a tokenizer. `path` is a directory, its tokenizer_config.json,
  /// or a .jinja file. In a directory, chat_template.jinja wins (as in transformers), else
  /// tokenizer_config.json's "chat_template" (a string, or a list of {"name", "template"}),
  /// else chat_template.json's; additional_chat_templates/NAME.jinja add named templates. The
  /// variables bos_token, eos_token, ... come from the tokenizer_config.json beside it (strings
  /// or {"content": ...} objects). Throws NoChatTemplate (an InputError naming the file) when the
  /// tokenizer has no template, InputError when a file cannot be read or is not JSON, or a template
  /// does not parse ("<file>: line N: syntax error: ..." / "unsupported construct: ...").
  static ChatTemplate load(const std::filesystem::path& path);

  /// A single template from its text; `origin` names it in errors and origin(). `special_tokens`
  /// is a JSON object of extra variables (bos_token, ...). Throws InputError as load() does.
  static ChatTemplate from_text(std::string_view text, const std::string& origin,
                                const nlohmann::ordered_json& special_tokens = nlohmann::ordered_json::object());

  /// The variables a render sees, as transformers passes them: messages, tools and documents
  /// (None unless `extra` gives them), add_generation_prompt, the special tokens, then every
  /// member of `extra` (a JSON object; it overrides the others, e.g. enable_thinking, tools).
  nlohmann::ordered_json context(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  /// Renders `messages` (a JSON array of {"role", "content", ...} objects). `template_name`
  /// empty: chosen as transformers does ("tool_use" when extra has non-null tools and such a
  /// template exists, else "default" or the only one). Throws InputError naming the template's
  /// file and line when rendering fails (raise_exception's message included), or for messages
  /// that are not an array of objects.
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object(),
                     const std::string& template_name = "") const;

  /// Renders with exactly `variables` (a JSON object; nothing added). For tests and tools.
  std::string render_variables(const nlohmann::ordered_json& variables, const std::string& template_name = "") const;

  /// Where the template came from: "<dir>/chat_template.jinja", "<dir>/tokenizer_config.json
  /// (chat_template)", or from_text's origin.
  const std::string& origin() const;
  /// Where the template that render() chooses for `extra` and `template_name` came from, for a
  /// record of what was rendered: "<dir>/chat_template.jinja", "<dir>/tokenizer_config.json
  /// (chat_template)", "<dir>/tokenizer_config.json (chat_template 'NAME')" for one of a named list,
  /// "<dir>/additional_chat_templates/NAME.jinja", or from_text's origin. Throws InputError as
  /// render() does for a name it has no template of.
  const std::string& source(const nlohmann::ordered_json& extra = nlohmann::ordered_json::object(),
                            const std::string& template_name = "") const;
  /// The names of the templates ("default" for a single one).
  std::vector<std::string> names() const;
  /// The source text of template `name` (empty: the one render() would choose without tools).
  const std::string& text(const std::string& name = "") const;
  /// The special-token variables (bos_token, eos_token, ...).
  const nlohmann::ordered_json& special_tokens() const;

  /// The parsed templates (opaque; defined in chat_template.cpp).
  struct Impl;

 private:
  explicit ChatTemplate(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

/// Chat messages from the text of a JSON file (kvscope-cli --messages, chat-template --messages): an
/// array of message objects, or {"messages": [...]}; each has a string "role" and a "content" (a
/// string or a list of parts; null or absent only beside "tool_calls"), and there is at least one.
/// Throws InputError naming `origin` (the file) for text that is not JSON or another shape, and
/// the message at fault.
nlohmann::ordered_json parse_chat_messages(std::string_view json_text, const std::string& origin);

/// A prompt as chat messages: `system` as a system message when given, then `user` as one user
/// message ([{"role": "system", "content": ...}, {"role": "user", "content": ...}]).
nlohmann::ordered_json user_chat_messages(std::string_view user,
                                          const std::optional<std::string>& system = std::nullopt);

}  // namespace kvscope
