// Executing statements: text, prints, if, for (loop variable, filter, else), set, macros, with,
// filter blocks, break/continue, with Jinja's scoping rules.
#include <string_view>

#include "jinja/access.h"
#include "jinja/error.h"
#include "jinja/filters.h"
#include "jinja/interpreter.h"

namespace kvscope::jinja {

Interpreter::Interpreter(const Program& program, const DictData& variables, DictData globals, RenderLimits limits)
    : program_(program), globals_(std::move(globals)), limits_(limits) {
  auto base = std::make_shared<Frame>();
  for (const auto& [k, v] : variables.items) (*base)[k] = v;
  scope_.push_back(std::move(base));
}

std::string Interpreter::render() {
  std::string out;
  exec_body(program_.body, out);
  return out;
}

void Interpreter::step() { charge(1); }

void Interpreter::charge(int64_t steps) {
  steps_ += steps;
  if (steps_ > limits_.max_steps)
    throw Error("unsupported construct: the template runs more than " + std::to_string(limits_.max_steps) + " steps");
}

void Interpreter::emit(std::string& out, std::string_view text) {
  if (out.size() + text.size() > limits_.max_output_bytes)
    throw Error("unsupported construct: the rendered text passes " + std::to_string(limits_.max_output_bytes) +
                " bytes");
  out += text;
}

Interpreter::Flow Interpreter::exec_body(const Body& body, std::string& out) {
  for (const StmtPtr& s : body) {
    const Flow f = exec(*s, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

void Interpreter::assign(const Target& target, const Value& v, int line) {
  Frame& frame = *scope_.back();
  if (!target.attribute.empty()) {
    const Value ns = lookup(target.names[0]);
    if (ns.kind() != Value::Kind::kNamespace) throw Error("cannot assign attribute on non-namespace object", line);
    ns.set_namespace_attribute(target.attribute, v);
    return;
  }
  if (!target.is_tuple) {
    frame[target.names[0]] = v;
    return;
  }
  const std::vector<Value> items = iterate(v);
  if (items.size() != target.names.size()) {
    if (items.size() > target.names.size())
      throw Error("too many values to unpack (expected " + std::to_string(target.names.size()) + ")", line);
    throw Error("not enough values to unpack (expected " + std::to_string(target.names.size()) + ", got " +
                    std::to_string(items.size()) + ")",
                line);
  }
  for (size_t i = 0; i < items.size(); ++i) frame[target.names[i]] = items[i];
}

std::string Interpreter::render_to_string(const Body& body) {
  std::string text;
  exec_body(body, text);
  return text;
}

Value Interpreter::apply_filter_chain(const std::vector<ExprPtr>& filters, Value v) {
  for (const ExprPtr& f : filters) {
    try {
      v = apply_filter(f->name, v, eval_args(*f));
    } catch (Error& e) {
      if (e.line == 0) e.line = f->line;
      throw;
    }
  }
  return v;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, std::string& out) {
  step();
  try {
    switch (s.kind) {
      case Stmt::Kind::kText:
        emit(out, s.text);
        return Flow::kNormal;
      case Stmt::Kind::kPrint:
        emit(out, to_str(eval(*s.expr)));
        return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (size_t i = 0; i < s.conditions.size(); ++i)
          if (truthy(eval(*s.conditions[i]))) return exec_body(s.bodies[i], out);
        return exec_body(s.else_body, out);
      case Stmt::Kind::kFor:
        return exec_for(s, out);
      case Stmt::Kind::kSet:
        assign(s.target, eval(*s.expr), s.line);
        return Flow::kNormal;
      case Stmt::Kind::kSetBlock: {
        scope_.push_back(std::make_shared<Frame>());
        std::string text;
        try {
          text = render_to_string(s.body);
        } catch (...) {
          scope_.pop_back();
          throw;
        }
        scope_.pop_back();
        assign(s.target, apply_filter_chain(s.filters, Value::string(std::move(text))), s.line);
        return Flow::kNormal;
      }
      case Stmt::Kind::kFilterBlock: {
        const std::string text = render_to_string(s.body);
        emit(out, to_str(apply_filter_chain(s.filters, Value::string(text))));
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro:
        define_macro(s);
        return Flow::kNormal;
      case Stmt::Kind::kCallBlock:
        emit(out, to_str(call_block(s)));
        return Flow::kNormal;
      case Stmt::Kind::kScope: {
        auto frame = std::make_shared<Frame>();
        for (const auto& [target, expr] : s.assignments) (*frame)[target.names[0]] = eval(*expr);
        scope_.push_back(std::move(frame));
        Flow f;
        try {
          f = exec_body(s.body, out);
        } catch (...) {
          scope_.pop_back();
          throw;
        }
        scope_.pop_back();
        return f;
      }
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
    }
  } catch (Error& e) {
    if (e.line == 0) e.line = s.line;
    throw;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, std::string& out) {
  const Value iterable = eval(*s.expr);
  std::vector<Value> items = iterate(iterable);
  if (s.filter) {
    // The loop filter sees the loop target (not `loop`) in a scope of its own.
    std::vector<Value> kept;
    for (Value& item : items) {
      scope_.push_back(std::make_shared<Frame>());
      bool keep;
      try {
        assign(s.target, item, s.line);
        keep = truthy(eval(*s.filter));
      } catch (...) {
        scope_.pop_back();
        throw;
      }
      scope_.pop_back();
      if (keep) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec_body(s.else_body, out);
  const int64_t n = static_cast<int64_t>(items.size());
  const int64_t depth = 1;  // only recursive loops (unsupported) go deeper
  for (int64_t i = 0; i < n; ++i) {
    step();
    auto frame = std::make_shared<Frame>();
    if (s.uses_loop) (*frame)["loop"] = loop_object(items, i, depth);
    scope_.push_back(std::move(frame));
    Flow f;
    try {
      assign(s.target, items[static_cast<size_t>(i)], s.line);
      f = exec_body(s.body, out);
    } catch (...) {
      scope_.pop_back();
      throw;
    }
    scope_.pop_back();
    if (f == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Value Interpreter::loop_object(const std::vector<Value>& items, int64_t i, int64_t depth) {
  const int64_t n = static_cast<int64_t>(items.size());
  DictData loop;
  loop.items.reserve(12);
  loop.items.emplace_back("index", Value::integer(i + 1));
  loop.items.emplace_back("index0", Value::integer(i));
  loop.items.emplace_back("revindex", Value::integer(n - i));
  loop.items.emplace_back("revindex0", Value::integer(n - i - 1));
  loop.items.emplace_back("first", Value::boolean(i == 0));
  loop.items.emplace_back("last", Value::boolean(i == n - 1));
  loop.items.emplace_back("length", Value::integer(n));
  loop.items.emplace_back("depth", Value::integer(depth));
  loop.items.emplace_back("depth0", Value::integer(depth - 1));
  if (i > 0) loop.items.emplace_back("previtem", items[static_cast<size_t>(i - 1)]);
  if (i + 1 < n) loop.items.emplace_back("nextitem", items[static_cast<size_t>(i + 1)]);
  loop.items.emplace_back("cycle", Value::function("loop.cycle", [i](const CallArgs& args) -> Value {
                            if (args.positional.empty()) throw Error("no items for cycling given");
                            return args.positional[static_cast<size_t>(i) % args.positional.size()];
                          }));
  return Value::dict(std::move(loop));
}

Value Interpreter::call_block(const Stmt& s) {
  // The block's body becomes `caller`, passed to the called macro.
  WeakScope here;
  for (const auto& frame : scope_) here.push_back(frame);
  const Stmt* stmt = &s;
  const Value caller =
      Value::function("caller", [this, stmt, here](const CallArgs& args) { return call_macro(*stmt, here, args); });
  const Expr& call = *s.expr;
  const Value callee = eval(*call.items[0]);
  CallArgs args = eval_args(call);
  args.keyword.emplace_back("caller", caller);
  if (callee.kind() != Value::Kind::kCallable) {
    if (callee.is_undefined()) throw Error(callee.undefined_message(), call.line);
    throw Error("'" + type_name(callee) + "' object is not callable", call.line);
  }
  return callee.as_callable().call(args);
}

void Interpreter::define_macro(const Stmt& s) {
  // Weak references: the macro is stored in one of these frames (a strong one would be a cycle).
  WeakScope defined_in;
  for (const auto& frame : scope_) defined_in.push_back(frame);
  const Stmt* stmt = &s;
  (*scope_.back())[s.text] = Value::function(
      s.text, [this, stmt, defined_in](const CallArgs& args) { return call_macro(*stmt, defined_in, args); });
}

Value Interpreter::call_macro(const Stmt& s, const WeakScope& defined_in, const CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth)
    throw Error("unsupported construct: macro calls nested deeper than " + std::to_string(limits_.max_call_depth));
  const size_t n = s.params.size();
  if (args.positional.size() > n)
    throw Error("macro '" + s.text + "' takes not more than " + std::to_string(n) + " argument(s)");
  std::vector<const Value*> given(n, nullptr);
  for (size_t i = 0; i < args.positional.size(); ++i) given[i] = &args.positional[i];
  const Value* caller = nullptr;
  for (const auto& [key, value] : args.keyword) {
    size_t i = 0;
    while (i < n && s.params[i] != key) ++i;
    if (i == n && key == "caller") {  // from a {% call %} block
      caller = &value;
      continue;
    }
    if (i == n) throw Error("macro '" + s.text + "' takes no keyword argument '" + key + "'");
    if (given[i]) throw Error("macro '" + s.text + "' got multiple values for argument '" + key + "'");
    given[i] = &value;
  }
  Scope saved = std::move(scope_);
  scope_.clear();
  for (const auto& weak : defined_in)
    if (auto frame = weak.lock()) scope_.push_back(std::move(frame));  // frames of a finished loop are gone
  scope_.push_back(std::make_shared<Frame>());
  ++call_depth_;
  std::string text;
  try {
    if (caller) (*scope_.back())["caller"] = *caller;
    const size_t first_default = n - s.defaults.size();
    for (size_t i = 0; i < n; ++i) {
      Value v;
      if (given[i])
        v = *given[i];
      else if (i >= first_default)
        v = eval(*s.defaults[i - first_default]);
      else
        v = Value::undefined("parameter '" + s.params[i] + "' was not provided");
      (*scope_.back())[s.params[i]] = std::move(v);
    }
    exec_body(s.body, text);
  } catch (...) {
    --call_depth_;
    scope_ = std::move(saved);
    throw;
  }
  --call_depth_;
  scope_ = std::move(saved);
  return Value::string(std::move(text));
}

}  // namespace kvscope::jinja
