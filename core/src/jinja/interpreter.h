#pragma once
// Rendering a parsed template: Jinja's scoping (a for loop's body and a macro get their own
// scope, an if does not), loop variables, macros, break/continue (jinja/ internal).
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "jinja/ast.h"
#include "jinja/value.h"

namespace kvscope::jinja {

/// Guards against templates that would not finish or would exhaust memory.
struct RenderLimits {
  int64_t max_steps = 5'000'000;       ///< statements, expressions, loop iterations (+1 per KiB of text made)
  size_t max_output_bytes = 1u << 28;  ///< 256 MiB of rendered text
  int max_call_depth = 64;             ///< nested macro calls
};

/// One render of a program (not reusable: create one per render).
class Interpreter {
 public:
  /// `variables` are the template's context (messages, add_generation_prompt, ...); `globals`
  /// are looked up after them (range, namespace, ...).
  Interpreter(const Program& program, const DictData& variables, DictData globals, RenderLimits limits = {});
  /// The rendered text. Throws Error (with the line of the node that failed).
  std::string render();

 private:
  using Frame = std::map<std::string, Value, std::less<>>;
  using Scope = std::vector<std::shared_ptr<Frame>>;
  using WeakScope = std::vector<std::weak_ptr<Frame>>;
  enum class Flow { kNormal, kBreak, kContinue };

  // Statements (render.cpp).
  Flow exec_body(const Body& body, std::string& out);
  Flow exec(const Stmt& s, std::string& out);
  Flow exec_for(const Stmt& s, std::string& out);
  static Value loop_object(const std::vector<Value>& items, int64_t i, int64_t depth);
  void define_macro(const Stmt& s);
  Value call_block(const Stmt& s);
  Value call_macro(const Stmt& s, const WeakScope& defined_in, const CallArgs& args);
  std::string render_to_string(const Body& body);
  Value apply_filter_chain(const std::vector<ExprPtr>& filters, Value v);
  void assign(const Target& target, const Value& v, int line);
  void emit(std::string& out, std::string_view text);
  void step();
  void charge(int64_t steps);

  // Expressions (eval.cpp).
  Value eval(const Expr& e);
  Value eval_node(const Expr& e);
  CallArgs eval_args(const Expr& e);
  Value lookup(const std::string& name) const;

  const Program& program_;
  DictData globals_;
  RenderLimits limits_;
  Scope scope_;  // innermost frame last
  int call_depth_ = 0;
  int64_t steps_ = 0;
};

}  // namespace kvscope::jinja
