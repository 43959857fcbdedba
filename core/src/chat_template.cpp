// ChatTemplate: finding a tokenizer's chat template(s) as transformers does, its special-token
// variables, and rendering with apply_chat_template's variables.
#include "kvscope/core/chat_template.h"

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>
#include <system_error>

#include "jinja/error.h"
#include "jinja/template.h"
#include "jinja/value.h"
#include "kvscope/core/errors.h"

namespace kvscope {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

struct ChatTemplate::Impl {
  std::string origin;
  std::vector<std::string> names;
  std::vector<std::string> texts;
  std::vector<std::string> sources;  ///< where each template came from (ChatTemplate::source)
  std::vector<jinja::Template> templates;
  ojson special_tokens = ojson::object();

  void add(const std::string& name, std::string text, const std::string& source_name) {
    templates.emplace_back(text, source_name);
    names.push_back(name);
    texts.push_back(std::move(text));
    sources.push_back(source_name);
  }

  /// transformers' choice: the named one; else "tool_use" with tools, "default", or the only one.
  size_t choose(const std::string& name, bool with_tools) const {
    const auto find = [&](const std::string& n) -> std::optional<size_t> {
      const auto it = std::find(names.begin(), names.end(), n);
      if (it == names.end()) return std::nullopt;
      return static_cast<size_t>(it - names.begin());
    };
    std::string all;
    for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
    if (!name.empty()) {
      if (auto i = find(name)) return *i;
      throw InputError(origin + ": no chat template named '" + name + "' (templates: " + all + ")");
    }
    if (names.size() == 1) return 0;
    if (with_tools)
      if (auto i = find("tool_use")) return *i;
    if (auto i = find("default")) return *i;
    throw InputError(origin + ": several chat templates (" + all + ") and none named 'default'; name one");
  }
};

namespace {

/// The template variables as Jinja values (errors: values nested too deeply).
jinja::DictData to_variables(const ojson& vars) {
  try {
    return jinja::Value::from_json(vars).as_dict();
  } catch (const jinja::Error& e) {
    throw InputError(std::string("chat template variables: ") + e.what());
  }
}

std::string read_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw InputError(path, "no such file");
  if (fs::is_directory(path, ec)) throw InputError(path, "is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw InputError(path, "cannot be read");
  return ss.str();
}

ojson read_json(const fs::path& path) {
  try {
    return ojson::parse(read_file(path));
  } catch (const ojson::parse_error& e) {
    throw InputError(path, std::string("not valid JSON: ") + e.what());
  }
}

/// A special token's text: a string, or an AddedToken object's "content"; empty if neither.
std::string token_text(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

/// transformers' special_tokens_map: the set (non-empty) special tokens, as strings.
ojson special_tokens_of(const ojson& config) {
  ojson out = ojson::object();
  if (!config.is_object()) return out;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (!config.contains(key)) continue;
    const std::string text = token_text(config[key]);
    if (!text.empty()) out[key] = text;
  }
  const auto token_list = [](const ojson& list) {
    ojson texts = ojson::array();
    for (const auto& t : list)
      if (const std::string s = token_text(t); !s.empty()) texts.push_back(s);
    return texts;
  };
  if (config.contains("additional_special_tokens") && config["additional_special_tokens"].is_array()) {
    ojson texts = token_list(config["additional_special_tokens"]);
    if (!texts.empty()) out["additional_special_tokens"] = texts;
  }
  if (config.contains("extra_special_tokens")) {
    const ojson& extra = config["extra_special_tokens"];
    if (extra.is_object()) {
      for (const auto& [name, token] : extra.items())
        if (const std::string s = token_text(token); !s.empty()) out[name] = s;
    } else if (extra.is_array() && !out.contains("additional_special_tokens")) {
      ojson texts = token_list(extra);
      if (!texts.empty()) out["additional_special_tokens"] = texts;
    }
  }
  return out;
}

/// tokenizer_config.json's (or chat_template.json's) "chat_template": a string or a named list.
void add_config_templates(ChatTemplate::Impl& impl, const ojson& value, const fs::path& file) {
  const std::string where = file.string() + " (chat_template";
  if (value.is_string()) {
    impl.add("default", value.get<std::string>(), where + ")");
    return;
  }
  if (!value.is_array())
    throw InputError(file, "chat_template must be a string or a list of {\"name\", \"template\"} objects");
  for (size_t i = 0; i < value.size(); ++i) {
    const ojson& entry = value[i];
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() || !entry.contains("template") ||
        !entry["template"].is_string())
      throw InputError(file, "chat_template entry " + std::to_string(i) +
                                 " is not a {\"name\": string, \"template\": string} object");
    const std::string name = entry["name"].get<std::string>();
    impl.add(name, entry["template"].get<std::string>(), where + " '" + name + "')");
  }
  if (impl.names.empty()) throw InputError(file, "chat_template is an empty list");
}

bool has_template_value(const ojson& config) {
  return config.is_object() && config.contains("chat_template") && !config["chat_template"].is_null();
}

/// The templates of a tokenizer directory; `config` is its tokenizer_config.json (may be absent).
std::shared_ptr<ChatTemplate::Impl> load_directory(const fs::path& dir, const fs::path& config_path) {
  auto impl = std::make_shared<ChatTemplate::Impl>();
  std::error_code ec;
  ojson config;
  if (fs::is_regular_file(config_path, ec)) {
    config = read_json(config_path);
    if (!config.is_object()) throw InputError(config_path, "not a JSON object");
    impl->special_tokens = special_tokens_of(config);
  }
  const fs::path jinja = dir / "chat_template.jinja";
  const fs::path legacy = dir / "chat_template.json";
  if (fs::exists(jinja, ec)) {
    impl->origin = jinja.string();
    impl->add("default", read_file(jinja), jinja.string());
    const fs::path extra_dir = dir / "additional_chat_templates";
    if (fs::is_directory(extra_dir, ec)) {
      std::vector<fs::path> extra;
      for (const auto& e : fs::directory_iterator(extra_dir, ec))
        if (e.path().extension() == ".jinja") extra.push_back(e.path());
      std::sort(extra.begin(), extra.end());
      for (const auto& p : extra) impl->add(p.stem().string(), read_file(p), p.string());
    }
  } else if (has_template_value(config)) {
    impl->origin = config_path.string() + " (chat_template)";
    add_config_templates(*impl, config["chat_template"], config_path);
  } else if (fs::is_regular_file(legacy, ec) && has_template_value(read_json(legacy))) {
    impl->origin = legacy.string() + " (chat_template)";
    add_config_templates(*impl, read_json(legacy)["chat_template"], legacy);
  } else {
    const fs::path named = fs::is_regular_file(config_path, ec) ? config_path : dir;
    throw NoChatTemplate(named,
                         "has no chat template (no chat_template.jinja, and no \"chat_template\" in "
                         "tokenizer_config.json): this tokenizer cannot render chat messages");
  }
  return impl;
}

}  // namespace

ChatTemplate::ChatTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

ChatTemplate ChatTemplate::load(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return ChatTemplate(load_directory(path, path / "tokenizer_config.json"));
  if (!fs::exists(path, ec)) throw InputError(path, "no such file or directory");
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  if (path.extension() == ".jinja") {
    auto impl = std::make_shared<Impl>();
    impl->origin = path.string();
    impl->add("default", read_file(path), path.string());
    const fs::path config = dir / "tokenizer_config.json";
    if (fs::is_regular_file(config, ec)) impl->special_tokens = special_tokens_of(read_json(config));
    return ChatTemplate(std::move(impl));
  }
  return ChatTemplate(load_directory(dir, path));
}

ChatTemplate ChatTemplate::from_text(std::string_view text, const std::string& origin, const ojson& special_tokens) {
  if (!special_tokens.is_object()) throw InputError(origin + ": special tokens must be a JSON object");
  auto impl = std::make_shared<Impl>();
  impl->origin = origin;
  impl->special_tokens = special_tokens;
  impl->add("default", std::string(text), origin);
  return ChatTemplate(std::move(impl));
}

ojson ChatTemplate::context(const ojson& messages, bool add_generation_prompt, const ojson& extra) const {
  if (!extra.is_object()) throw InputError("chat template variables must be a JSON object");
  ojson vars = ojson::object();
  vars["messages"] = messages;
  vars["tools"] = nullptr;
  vars["documents"] = nullptr;
  vars["add_generation_prompt"] = add_generation_prompt;
  for (const auto& [k, v] : impl_->special_tokens.items()) vars[k] = v;
  for (const auto& [k, v] : extra.items()) vars[k] = v;
  return vars;
}

std::string ChatTemplate::render(const ojson& messages, bool add_generation_prompt, const ojson& extra,
                                 const std::string& template_name) const {
  if (!messages.is_array())
    throw InputError(std::string("chat messages must be a JSON array of message objects, not ") + messages.type_name());
  for (size_t i = 0; i < messages.size(); ++i)
    if (!messages[i].is_object())
      throw InputError("chat message " + std::to_string(i) +
                       " is not a JSON object (expected {\"role\", \"content\"})");
  const ojson vars = context(messages, add_generation_prompt, extra);
  const bool with_tools = vars.contains("tools") && !vars["tools"].is_null();
  const size_t i = impl_->choose(template_name, with_tools);
  return impl_->templates[i].render(to_variables(vars));
}

std::string ChatTemplate::render_variables(const ojson& variables, const std::string& template_name) const {
  if (!variables.is_object()) throw InputError("chat template variables must be a JSON object");
  const bool with_tools = variables.contains("tools") && !variables["tools"].is_null();
  const size_t i = impl_->choose(template_name, with_tools);
  return impl_->templates[i].render(to_variables(variables));
}

const std::string& ChatTemplate::origin() const { return impl_->origin; }

const std::string& ChatTemplate::source(const ojson& extra, const std::string& template_name) const {
  const bool with_tools = extra.is_object() && extra.contains("tools") && !extra["tools"].is_null();
  return impl_->sources[impl_->choose(template_name, with_tools)];
}

std::vector<std::string> ChatTemplate::names() const { return impl_->names; }

const std::string& ChatTemplate::text(const std::string& name) const {
  return impl_->texts[impl_->choose(name, false)];
}

const ojson& ChatTemplate::special_tokens() const { return impl_->special_tokens; }

ojson parse_chat_messages(std::string_view json_text, const std::string& origin) {
  ojson doc;
  try {
    doc = ojson::parse(json_text);
  } catch (const ojson::parse_error& e) {
    throw InputError(origin, std::string("not valid JSON: ") + e.what());
  }
  if (doc.is_object() && doc.contains("messages")) doc = std::move(doc["messages"]);
  const std::string shape = "expected a JSON array of messages ({\"role\", \"content\"} objects)";
  if (!doc.is_array()) throw InputError(origin, shape + ", not " + doc.type_name());
  if (doc.empty()) throw InputError(origin, "holds no messages: " + shape);
  for (size_t i = 0; i < doc.size(); ++i) {
    const ojson& m = doc[i];
    const std::string which = "message " + std::to_string(i);
    if (!m.is_object()) throw InputError(origin, which + " is not a {\"role\", \"content\"} object");
    if (!m.contains("role") || !m["role"].is_string())
      throw InputError(origin, which + " has no \"role\" string (\"system\", \"user\", \"assistant\", ...)");
    const bool content = m.contains("content") && !m["content"].is_null();
    if (content && !m["content"].is_string() && !m["content"].is_array())
      throw InputError(origin,
                       which + "'s \"content\" is " + m["content"].type_name() + ", not a string or a list of parts");
    if (!content && !m.contains("tool_calls"))
      throw InputError(origin, which + " has no \"content\" (only a message with \"tool_calls\" may omit it)");
  }
  return doc;
}

ojson user_chat_messages(std::string_view user, const std::optional<std::string>& system) {
  ojson out = ojson::array();
  if (system) out.push_back({{"role", "system"}, {"content", *system}});
  out.push_back({{"role", "user"}, {"content", std::string(user)}});
  return out;
}

}  // namespace kvscope
