// Jinja 3's built-in tests.
#include "jinja/is_tests.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "jinja/args.h"
#include "jinja/catalog.h"
#include "jinja/error.h"
#include "jinja/operators.h"
#include "jinja/pystr.h"

namespace kvscope::jinja {
namespace {

constexpr std::string_view kTests[] = {
    "boolean",  "callable", "defined",  "divisibleby", "eq",          "equalto", "escaped", "even",
    "false",    "filter",   "float",    "ge",          "greaterthan", "gt",      "in",      "integer",
    "iterable", "le",       "lessthan", "lower",       "lt",          "mapping", "ne",      "none",
    "number",   "odd",      "sameas",   "sequence",    "string",      "test",    "true",    "undefined",
    "upper",    "==",       "!=",       "<",           "<=",          ">",       ">="};

bool is_odd(const Value& v) {
  const Value r = binary_op("%", v, Value::integer(2));
  return equals(r, Value::integer(1));
}

bool case_test(const Value& v, bool lower) {
  bool any_cased = false;
  for (char32_t c : decode_utf8(to_str(v))) {
    const bool lo = py_is_lower_cased(c), up = py_is_upper_cased(c);
    if (lower ? up : lo) return false;
    any_cased = any_cased || lo || up;
  }
  return any_cased;
}

}  // namespace

bool is_supported_test(std::string_view name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

bool apply_test(const std::string& name, const Value& v, const CallArgs& args) {
  using K = Value::Kind;
  const auto no_args = [&] { BoundArgs(args, name, {}); };
  const auto other = [&](std::string_view param) { return BoundArgs(args, name, {param}).get(0); };
  if (name == "defined" || name == "undefined") {
    no_args();
    return v.is_undefined() == (name == "undefined");
  }
  if (name == "none") return no_args(), v.is_none();
  if (name == "boolean") return no_args(), v.kind() == K::kBool;
  if (name == "true") return no_args(), v.kind() == K::kBool && v.as_bool();
  if (name == "false") return no_args(), v.kind() == K::kBool && !v.as_bool();
  if (name == "integer") return no_args(), v.kind() == K::kInt;
  if (name == "float") return no_args(), v.kind() == K::kFloat;
  if (name == "number") return no_args(), v.is_number();
  if (name == "string") return no_args(), v.is_string();
  if (name == "mapping") return no_args(), v.is_dict();
  if (name == "iterable") return no_args(), v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "sequence") return no_args(), v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "callable") return no_args(), v.kind() == K::kCallable || v.is_undefined();
  if (name == "escaped") return no_args(), false;
  if (name == "odd" || name == "even") {
    no_args();
    if (v.is_undefined()) throw Error(v.undefined_message());
    return is_odd(v) == (name == "odd");
  }
  if (name == "divisibleby") {
    const Value r = binary_op("%", v, other("num"));
    return equals(r, Value::integer(0));
  }
  if (name == "lower" || name == "upper") return no_args(), case_test(v, name == "lower");
  if (name == "sameas") return v.same_object(other("other"));
  if (name == "in") return contains(other("seq"), v);
  if (name == "filter" || name == "test") {  // `'upper' is filter`: the value is the name
    no_args();
    if (!v.is_string()) return false;
    return name == "filter" ? is_supported_filter(v.as_string()) : is_supported_test(v.as_string());
  }
  const Value& b = other("other");
  if (name == "eq" || name == "equalto" || name == "==") return compare("==", v, b);
  if (name == "ne" || name == "!=") return compare("!=", v, b);
  if (name == "lt" || name == "lessthan" || name == "<") return compare("<", v, b);
  if (name == "le" || name == "<=") return compare("<=", v, b);
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(">", v, b);
  if (name == "ge" || name == ">=") return compare(">=", v, b);
  throw Error("unsupported construct: test '" + name + "'");
}

}  // namespace kvscope::jinja
