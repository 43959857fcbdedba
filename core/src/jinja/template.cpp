// Template: parse once, render many times; jinja::Error -> InputError with the source and line.
#include "jinja/template.h"

#include "jinja/ast.h"
#include "jinja/error.h"
#include "jinja/globals.h"
#include "jinja/interpreter.h"
#include "jinja/parser.h"
#include "jinja/pystr.h"
#include "kvscope/core/errors.h"

namespace kvscope::jinja {
namespace {

[[noreturn]] void rethrow(const std::string& source_name, const Error& e) {
  std::string message = e.what();
  // One line: a message with newlines (raise_exception's text, say) is flattened.
  for (char& c : message)
    if (c == '\n' || c == '\r') c = ' ';
  throw InputError(source_name + ": " + (e.line > 0 ? "line " + std::to_string(e.line) + ": " : "") + message);
}

}  // namespace

Template::Template(std::string_view source, std::string source_name) : source_name_(std::move(source_name)) {
  if (const size_t bad = first_invalid_utf8(source); bad != std::string_view::npos)
    throw InputError(source_name_ + ": not valid UTF-8 at byte " + std::to_string(bad));
  try {
    program_ = std::make_shared<const Program>(parse_template(source));
  } catch (const Error& e) {
    rethrow(source_name_, e);
  }
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const DictData& variables) const {
  try {
    Interpreter interpreter(*program_, variables, builtin_globals());
    return interpreter.render();
  } catch (const Error& e) {
    rethrow(source_name_, e);
  }
}

}  // namespace kvscope::jinja
