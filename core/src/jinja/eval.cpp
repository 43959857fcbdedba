// Evaluating expressions: names, literals, attribute/item access, calls, filters, tests and
// operators (short-circuit and/or, chained comparisons, inline if).
#include <optional>

#include "jinja/access.h"
#include "jinja/error.h"
#include "jinja/filters.h"
#include "jinja/interpreter.h"
#include "jinja/is_tests.h"
#include "jinja/operators.h"

namespace kvscope::jinja {

Value Interpreter::lookup(const std::string& name) const {
  for (auto it = scope_.rbegin(); it != scope_.rend(); ++it) {
    const auto found = (*it)->find(name);
    if (found != (*it)->end()) return found->second;
  }
  if (const Value* g = globals_.find(name)) return *g;
  return Value::undefined("'" + name + "' is undefined");
}

CallArgs Interpreter::eval_args(const Expr& e) {
  CallArgs args;
  args.positional.reserve(e.args.size());
  for (const ExprPtr& a : e.args) args.positional.push_back(eval(*a));
  for (const auto& [key, expr] : e.kwargs) args.keyword.emplace_back(key, eval(*expr));
  if (e.star_args)
    for (Value& v : iterate(eval(*e.star_args))) args.positional.push_back(std::move(v));
  if (e.star_kwargs) {
    const Value kw = eval(*e.star_kwargs);
    if (!kw.is_dict()) throw Error("argument after ** must be a mapping, not " + type_name(kw), e.star_kwargs->line);
    for (const auto& [k, v] : kw.as_dict().items) args.keyword.emplace_back(k, v);
  }
  return args;
}

Value Interpreter::eval(const Expr& e) {
  step();
  try {
    Value v = eval_node(e);
    // Large values cost in proportion to the bytes they copy: a template that keeps doubling a
    // string or list runs out of steps instead of time.
    if (v.is_string()) {
      check_string_size(static_cast<double>(v.as_string().size()));
      charge(static_cast<int64_t>(v.as_string().size() >> 10));
    }
    if (v.is_list()) charge(static_cast<int64_t>(v.as_list().items.size() >> 6));
    return v;
  } catch (Error& err) {
    if (err.line == 0) err.line = e.line;
    throw;
  }
}

Value Interpreter::eval_node(const Expr& e) {
  using K = Expr::Kind;
  switch (e.kind) {
    case K::kLiteral:
      return e.value;
    case K::kName:
      return lookup(e.name);
    case K::kList:
    case K::kTuple: {
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (const ExprPtr& item : e.items) items.push_back(eval(*item));
      return Value::list(std::move(items), e.kind == K::kTuple);
    }
    case K::kDict: {
      DictData d;
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        const Value key = eval(*e.items[i]);
        if (!key.is_string())
          throw Error("unsupported construct: a dict key of type '" + type_name(key) + "' (only str keys)",
                      e.items[i]->line);
        d.set(key.as_string(), eval(*e.items[i + 1]));
      }
      return Value::dict(std::move(d));
    }
    case K::kGetAttr:
      return get_attr(eval(*e.items[0]), e.name);
    case K::kGetItem: {
      const Value obj = eval(*e.items[0]);
      return get_item(obj, eval(*e.items[1]));
    }
    case K::kSlice: {
      const Value obj = eval(*e.items[0]);
      const auto part = [&](size_t i) -> std::optional<Value> {
        if (!e.items[i]) return std::nullopt;
        return eval(*e.items[i]);
      };
      const auto start = part(1), stop = part(2), stride = part(3);
      return get_slice(obj, start, stop, stride);
    }
    case K::kCall: {
      const Value callee = eval(*e.items[0]);
      const CallArgs args = eval_args(e);
      if (callee.kind() == Value::Kind::kCallable) return callee.as_callable().call(args);
      if (callee.is_undefined()) throw Error(callee.undefined_message());
      throw Error("'" + type_name(callee) + "' object is not callable");
    }
    case K::kFilter: {
      const Value input = eval(*e.items[0]);
      return apply_filter(e.name, input, eval_args(e));
    }
    case K::kTest: {
      const Value input = eval(*e.items[0]);
      return Value::boolean(apply_test(e.name, input, eval_args(e)));
    }
    case K::kNot:
      return Value::boolean(!truthy(eval(*e.items[0])));
    case K::kNegate:
      return unary_op("-", eval(*e.items[0]));
    case K::kPlus:
      return unary_op("+", eval(*e.items[0]));
    case K::kBinary: {
      const Value a = eval(*e.items[0]);
      return binary_op(e.name, a, eval(*e.items[1]));
    }
    case K::kCompare: {
      Value left = eval(*e.items[0]);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.items[i + 1]);
        if (!compare(e.ops[i], left, right)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case K::kAnd: {
      Value left = eval(*e.items[0]);
      if (!truthy(left)) return left;
      return eval(*e.items[1]);
    }
    case K::kOr: {
      Value left = eval(*e.items[0]);
      if (truthy(left)) return left;
      return eval(*e.items[1]);
    }
    case K::kCondition:
      if (truthy(eval(*e.items[1]))) return eval(*e.items[0]);
      if (e.items[2]) return eval(*e.items[2]);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
  }
  throw Error("unsupported construct: expression");
}

}  // namespace kvscope::jinja
