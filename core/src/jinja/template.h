#pragma once
// A parsed Jinja template with transformers' environment, and its errors as kvscope's one-line
// InputError "<source>: line N: <problem>" (jinja/ internal; the public API is chat_template.h).
#include <memory>
#include <string>
#include <string_view>

#include "jinja/value.h"

namespace kvscope::jinja {

struct Program;

/// A template parsed once and rendered any number of times (thread-safe to render).
class Template {
 public:
  /// Parses `source`. Throws InputError("<source_name>: line N: syntax error: ..." or
  /// "...: unsupported construct: ...") and for text that is not UTF-8.
  Template(std::string_view source, std::string source_name);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  /// Renders with `variables` (the built-in globals are added below them). Throws InputError
  /// "<source_name>: line N: <problem>" for anything that fails while rendering (an undefined
  /// value used, raise_exception, a type error, ...).
  std::string render(const DictData& variables) const;

  const std::string& source_name() const { return source_name_; }

 private:
  std::string source_name_;
  std::shared_ptr<const Program> program_;
};

}  // namespace kvscope::jinja
