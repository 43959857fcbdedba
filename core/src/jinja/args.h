#pragma once
// Binding a call's positional and keyword arguments to named parameters, as Python does
// (filters, tests, methods and globals use it) (jinja/ internal).
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/value.h"

namespace kvscope::jinja {

/// A call's arguments bound to parameter names.
class BoundArgs {
 public:
  /// Binds `args` to `params` (in order). Throws Error for too many positional arguments, an
  /// unknown keyword or one given twice, naming `func`.
  BoundArgs(const CallArgs& args, std::string_view func, std::initializer_list<std::string_view> params);
  /// Whether parameter i was given.
  bool has(size_t i) const { return slots_[i].has_value(); }
  /// Parameter i; throws Error("<func>() missing required argument '<name>'") if not given.
  const Value& get(size_t i) const;
  /// Parameter i, or `fallback` if not given.
  Value get_or(size_t i, Value fallback) const { return slots_[i] ? *slots_[i] : std::move(fallback); }
  /// Parameter i as an int (bool counts), `fallback` if not given or None. Throws Error otherwise.
  int64_t int_or(size_t i, int64_t fallback) const;
  /// Parameter i as a bool (Python truth), `fallback` if not given.
  bool bool_or(size_t i, bool fallback) const { return slots_[i] ? truthy(*slots_[i]) : fallback; }
  /// Parameter i as a string, nullopt if not given or None. Throws Error for other types.
  std::optional<std::string> string_or_none(size_t i) const;

 private:
  std::string func_;
  std::vector<std::string_view> names_;
  std::vector<std::optional<Value>> slots_;
};

}  // namespace kvscope::jinja
