#pragma once
// Python's json.dumps for Jinja values: transformers' `tojson` filter (ensure_ascii=False by
// default, optional indent, separators, sort_keys) (jinja/ internal).
#include <optional>
#include <string>

#include "jinja/value.h"

namespace kvscope::jinja {

/// json.dumps keyword arguments.
struct JsonDumpOptions {
  /// None: one line. Else the text of one level of indentation (indent=2 -> "  ").
  std::optional<std::string> indent;
  /// separators; json.dumps' defaults are (", ", ": ") without indent and (",", ": ") with it.
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};

/// json.dumps(v, ...). Throws Error("Object of type X is not JSON serializable") for undefined,
/// namespaces and callables.
std::string json_dumps(const Value& v, const JsonDumpOptions& options);

}  // namespace kvscope::jinja
