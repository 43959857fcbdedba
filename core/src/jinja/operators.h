#pragma once
// Python's operators on Jinja values: arithmetic, `~`, comparisons and `in` (jinja/ internal).
#include <string_view>

#include "jinja/value.h"

namespace kvscope::jinja {

/// a OP b for + - * / // % ** (Python semantics; int overflow is refused) and ~ (str() of both).
/// Throws Error for an undefined operand (its message), a type error or a division by zero.
Value binary_op(std::string_view op, const Value& a, const Value& b);
/// -a and +a on numbers.
Value unary_op(std::string_view op, const Value& a);
/// a OP b for == != < <= > >= in notin. Ordering works on numbers, strings and lists.
bool compare(std::string_view op, const Value& a, const Value& b);
/// `item in container`: a substring, a list element, a dict key; false for undefined.
bool contains(const Value& container, const Value& item);

}  // namespace kvscope::jinja
