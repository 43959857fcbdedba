// Python's arithmetic, comparison and membership operators on Jinja values.
#include "jinja/operators.h"

#include <cmath>
#include <string>

#include "jinja/error.h"

namespace kvscope::jinja {
namespace {

[[noreturn]] void unsupported_operands(std::string_view op, const Value& a, const Value& b) {
  throw Error("unsupported operand type(s) for " + std::string(op) + ": '" + type_name(a) + "' and '" + type_name(b) +
              "'");
}

[[noreturn]] void overflow() { throw Error("unsupported construct: integer overflow (past 64 bits)"); }

int64_t add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}

int64_t sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}

int64_t mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

int64_t int_pow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) result = mul(result, base);
    exp >>= 1;
    if (exp) base = mul(base, base);
  }
  return result;
}

/// Python's float floor division and modulo (Objects/floatobject.c float_divmod).
std::pair<double, double> float_divmod(double vx, double wx) {
  if (wx == 0.0) throw Error("float division by zero");
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0.0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  double floordiv;
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, vx / wx);
  }
  return {floordiv, mod};
}

Value repeat(const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value::string("") : Value::list({}, seq.as_list().is_tuple);
  if (seq.is_string()) {
    check_string_size(static_cast<double>(seq.as_string().size()) * static_cast<double>(n));
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value::string(std::move(out));
  }
  const auto& items = seq.as_list().items;
  if (static_cast<double>(items.size()) * static_cast<double>(n) > static_cast<double>(kMaxStringBytes >> 4))
    throw Error("unsupported construct: a list of more than 2^22 items");
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), seq.as_list().is_tuple);
}

/// Three-way ordering for < <= > >=; throws TypeError-like errors for unordered types.
int order(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) throw Error(a.undefined_message());
  if (b.is_undefined()) throw Error(b.undefined_message());
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) {
      const double x = a.as_double(), y = b.as_double();
      if (x != x || y != y) return 2;  // NaN: every ordering is false
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto &x = a.as_list().items, &y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return order(op, x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  throw Error("'" + std::string(op) + "' not supported between instances of '" + type_name(a) + "' and '" +
              type_name(b) + "'");
}

}  // namespace

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string left = to_str(a), right = to_str(b);
    check_string_size(static_cast<double>(left.size()) + static_cast<double>(right.size()));
    return Value::string(std::move(left) + right);
  }
  if (a.is_undefined()) throw Error(a.undefined_message());
  if (b.is_undefined()) throw Error(b.undefined_message());
  const bool ints = a.is_integral() && b.is_integral();
  const bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) return Value::integer(add(a.as_int(), b.as_int()));
    if (nums) return Value::number(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      check_string_size(static_cast<double>(a.as_string().size()) + static_cast<double>(b.as_string().size()));
      return Value::string(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
      if (a.as_list().items.size() + b.as_list().items.size() > (kMaxStringBytes >> 4))
        throw Error("unsupported construct: a list of more than 2^22 items");
      std::vector<Value> out = a.as_list().items;
      out.insert(out.end(), b.as_list().items.begin(), b.as_list().items.end());
      return Value::list(std::move(out), a.as_list().is_tuple);
    }
    if (a.is_string()) throw Error("can only concatenate str (not \"" + type_name(b) + "\") to str");
    if (a.is_list())
      throw Error("can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
    unsupported_operands(op, a, b);
  }
  if (op == "-") {
    if (ints) return Value::integer(sub(a.as_int(), b.as_int()));
    if (nums) return Value::number(a.as_double() - b.as_double());
    unsupported_operands(op, a, b);
  }
  if (op == "*") {
    if (ints) return Value::integer(mul(a.as_int(), b.as_int()));
    if (nums) return Value::number(a.as_double() * b.as_double());
    if ((a.is_string() || a.is_list()) && b.is_integral()) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && a.is_integral()) return repeat(b, a.as_int());
    unsupported_operands(op, a, b);
  }
  if (op == "/") {
    if (!nums) unsupported_operands(op, a, b);
    if (b.as_double() == 0.0) throw Error("division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (!nums) {
      if (op == "%" && a.is_string()) throw Error("unsupported construct: printf-style '%' string formatting");
      unsupported_operands(op, a, b);
    }
    if (ints) {
      const int64_t x = a.as_int(), y = b.as_int();
      if (y == 0) throw Error(op == "//" ? "integer division or modulo by zero" : "integer modulo by zero");
      if (x == INT64_MIN && y == -1) overflow();
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        m += y;
        q -= 1;
      }
      return Value::integer(op == "//" ? q : m);
    }
    const auto [q, m] = float_divmod(a.as_double(), b.as_double());
    return Value::number(op == "//" ? q : m);
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) return Value::integer(int_pow(a.as_int(), b.as_int()));
    if (nums) {
      if (a.as_double() == 0.0 && b.as_double() < 0) throw Error("0.0 cannot be raised to a negative power");
      return Value::number(std::pow(a.as_double(), b.as_double()));
    }
    unsupported_operands(op, a, b);
  }
  throw Error("unsupported construct: operator '" + std::string(op) + "'");
}

Value unary_op(std::string_view op, const Value& a) {
  if (a.is_undefined()) throw Error(a.undefined_message());
  if (a.is_integral()) {
    if (op == "+") return Value::integer(a.as_int());
    if (a.as_int() == INT64_MIN) overflow();
    return Value::integer(-a.as_int());
  }
  if (a.kind() == Value::Kind::kFloat) return Value::number(op == "-" ? -a.as_double() : a.as_double());
  throw Error("bad operand type for unary " + std::string(op) + ": '" + type_name(a) + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) throw Error("'in <string>' requires string as left operand, not " + type_name(item));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.as_list().items)
        if (equals(v, item)) return true;
      return false;
    case Value::Kind::kDict:
      return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    default:
      throw Error("argument of type '" + type_name(container) + "' is not iterable");
  }
}

bool compare(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  const int c = order(op, a, b);
  if (c == 2) return false;
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

}  // namespace kvscope::jinja
