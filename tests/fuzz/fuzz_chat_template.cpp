// libFuzzer: chat templates (core/src/jinja, library kvscope_chat): the lexer and parser on any
// text, then a render of what parses against a small conversation, with tight limits so that one
// input stays well under the fuzzer's timeout (the library's own limits are far larger).
// Oracle: bad templates and failed renders throw jinja::Error only, with a non-empty message and a
// line inside the template; nothing else escapes (no crash, UB, leak, hang or other exception).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "jinja/error.h"
#include "jinja/globals.h"
#include "jinja/interpreter.h"
#include "jinja/parser.h"
#include "jinja/pystr.h"
#include "jinja/value.h"
#include "kvscope/core/chat_template.h"
#include "kvscope/core/errors.h"

namespace {

using kvscope::jinja::Value;

kvscope::jinja::DictData variables() {
  const auto messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " Hi\n"}]},
    {"role": "assistant", "content": "<think>\nr\n</think>\n\nOK", "tool_calls": [
      {"type": "function", "function": {"name": "f", "arguments": {"x": 1.5, "y": [true, null]}}}]},
    {"role": "tool", "content": "42"}])");
  kvscope::jinja::DictData vars;
  vars.set("messages", Value::from_json(messages));
  vars.set("add_generation_prompt", Value::boolean(true));
  vars.set("bos_token", Value::string("<s>"));
  vars.set("eos_token", Value::string("</s>"));
  vars.set("tools", Value::none());
  vars.set("documents", Value::none());
  return vars;
}

void check(const kvscope::jinja::Error& e, std::string_view text) {
  int lines = 1;
  for (char c : text) lines += c == '\n' || c == '\r';
  if (std::string_view(e.what()).empty() || e.line < 0 || e.line > lines + 1) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (kvscope::first_invalid_utf8(text) != std::string_view::npos) {
    // Not UTF-8: refused in one InputError before parsing.
    try {
      kvscope::ChatTemplate::from_text(text, "fuzz.jinja");
    } catch (const kvscope::InputError&) {
      return 0;
    }
    std::abort();
  }
  kvscope::jinja::Program program;
  try {
    program = kvscope::jinja::parse_template(text);
  } catch (const kvscope::jinja::Error& e) {
    check(e, text);
    return 0;
  }
  kvscope::jinja::RenderLimits limits;
  limits.max_steps = 20000;
  limits.max_output_bytes = 1 << 20;
  limits.max_call_depth = 16;
  try {
    kvscope::jinja::Interpreter(program, variables(), kvscope::jinja::builtin_globals(), limits).render();
  } catch (const kvscope::jinja::Error& e) {
    check(e, text);
  }
  return 0;
}
