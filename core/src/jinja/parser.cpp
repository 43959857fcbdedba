// The Jinja parser: Jinja 3's grammar (parser.py) for the tags and expressions chat templates use.
#include "jinja/parser.h"

#include <initializer_list>

#include "jinja/catalog.h"
#include "jinja/error.h"
#include "jinja/lexer.h"

namespace kvscope::jinja {
namespace {

constexpr int kMaxDepth = 200;  // nesting of expressions and blocks (a guard for the stack)

/// Tags of Jinja 3 (and its bundled extensions) that the renderer does not implement.
bool is_unsupported_tag(std::string_view name) {
  for (std::string_view t :
       {"include", "import", "from", "extends", "block", "autoescape", "trans", "pluralize", "do", "debug"})
    if (name == t) return true;
  return false;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Program run() {
    Program p;
    std::string found;
    p.body = subparse({}, &found);
    return p;
  }

 private:
  // ---- token stream -------------------------------------------------------------------------
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& next() {
    const Token& tok = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return tok;
  }
  bool is_op(std::string_view op) const { return cur().type == TokenType::kOperator && cur().text == op; }
  bool is_name(std::string_view name) const { return cur().type == TokenType::kName && cur().text == name; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const std::string& message, int line) const { throw Error("syntax error: " + message, line); }
  [[noreturn]] void unexpected(const std::string& expected) const {
    fail("expected " + expected + ", got " + describe(cur()), cur().line);
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) unexpected("'" + std::string(op) + "'");
  }
  std::string expect_name() {
    if (cur().type != TokenType::kName) unexpected("a name");
    return next().text;
  }
  void expect_block_end() {
    skip_op(":");  // Jinja accepts `{% if x: %}`
    if (cur().type != TokenType::kBlockEnd) unexpected("end of statement block '%}'");
    next();
  }

  /// Guards recursion depth.
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p(p) {
      if (++p.depth_ > kMaxDepth)
        throw Error("unsupported construct: nesting deeper than " + std::to_string(kMaxDepth) + " levels",
                    p.cur().line);
    }
    ~DepthGuard() { --p.depth_; }
    Parser& p;
  };

  ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // ---- statements ---------------------------------------------------------------------------
  /// Statements up to a block whose tag name is in `end_names`; leaves that name as the current
  /// token and stores it in *found. At the top level (no end names) reads to the end.
  Body subparse(std::initializer_list<std::string_view> end_names, std::string* found) {
    DepthGuard guard(*this);
    Body body;
    while (cur().type != TokenType::kEnd) {
      const Token& tok = cur();
      if (tok.type == TokenType::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->line = tok.line;
        s->text = tok.text;
        body.push_back(std::move(s));
        next();
      } else if (tok.type == TokenType::kVariableBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kPrint;
        s->line = tok.line;
        s->expr = parse_tuple(true, {});
        if (cur().type != TokenType::kVariableEnd) unexpected("end of print statement '}}'");
        next();
        body.push_back(std::move(s));
      } else if (tok.type == TokenType::kBlockBegin) {
        next();
        if (cur().type == TokenType::kName) {
          for (std::string_view e : end_names) {
            if (cur().text == e) {
              *found = cur().text;
              return body;
            }
          }
        }
        body.push_back(parse_statement());
      } else {
        unexpected("template data or a tag");
      }
    }
    if (end_names.size() != 0) {
      std::string names;
      for (std::string_view e : end_names) names += (names.empty() ? "'" : " or '") + std::string(e) + "'";
      fail("unexpected end of template, expected " + names, cur().line);
    }
    return body;
  }

  /// subparse() that also consumes the end tag (which must take no arguments).
  Body block_until(std::string_view end_name) {
    std::string found;
    Body body = subparse({end_name}, &found);
    next();
    expect_block_end();
    return body;
  }

  StmtPtr parse_statement() {
    if (cur().type != TokenType::kName) unexpected("a tag name");
    const Token& tok = cur();
    const std::string name = tok.text;
    auto s = std::make_unique<Stmt>();
    s->line = tok.line;
    if (name == "if") return parse_if(std::move(s));
    if (name == "for") return parse_for(std::move(s));
    if (name == "set") return parse_set(std::move(s));
    if (name == "macro") return parse_macro(std::move(s));
    if (name == "call") return parse_call_block(std::move(s));
    if (name == "with") return parse_with(std::move(s));
    if (name == "filter") return parse_filter_block(std::move(s));
    if (name == "break" || name == "continue") {
      next();
      if (loop_depth_ == 0) fail("'" + name + "' outside of a loop", tok.line);
      s->kind = name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      expect_block_end();
      return s;
    }
    if (name == "generation") {  // transformers' AssistantTracker: the body as is
      next();
      expect_block_end();
      s->kind = Stmt::Kind::kScope;
      s->body = block_until("endgeneration");
      return s;
    }
    if (is_unsupported_tag(name)) throw Error("unsupported construct: tag '" + name + "'", tok.line);
    fail("unknown tag '" + name + "'", tok.line);
  }

  StmtPtr parse_if(StmtPtr s) {
    s->kind = Stmt::Kind::kIf;
    next();  // if
    while (true) {
      s->conditions.push_back(parse_tuple(false, {}));
      expect_block_end();
      std::string found;
      s->bodies.push_back(subparse({"elif", "else", "endif"}, &found));
      next();
      if (found == "elif") continue;
      if (found == "else") {
        expect_block_end();
        s->else_body = block_until("endif");
        return s;
      }
      expect_block_end();
      return s;
    }
  }

  /// A for/with target: name, or names separated by commas (optionally in parentheses).
  Target parse_target_names() {
    Target target;
    const bool paren = skip_op("(");
    while (true) {
      target.names.push_back(expect_name());
      if (!skip_op(",")) break;
      target.is_tuple = true;
      if (is_name("in") || is_op(")") || is_op("=")) break;  // trailing comma
    }
    if (paren) expect_op(")");
    return target;
  }

  StmtPtr parse_for(StmtPtr s) {
    s->kind = Stmt::Kind::kFor;
    next();  // for
    s->target = parse_target_names();
    if (!skip_name("in")) unexpected("'in'");
    s->expr = parse_tuple(false, {"recursive"});
    if (skip_name("if")) s->filter = parse_expression(true);
    if (is_name("recursive")) throw Error("unsupported construct: recursive for loop", cur().line);
    expect_block_end();
    ++loop_depth_;
    std::string found;
    const size_t first_token = i_;
    s->body = subparse({"endfor", "else"}, &found);
    s->uses_loop = false;
    for (size_t k = first_token; k < i_ && !s->uses_loop; ++k)
      s->uses_loop = t_[k].type == TokenType::kName && t_[k].text == "loop";
    --loop_depth_;
    next();
    expect_block_end();
    if (found == "else") {
      const int saved = loop_depth_;
      loop_depth_ = 0;  // `break` in for's else is outside the loop
      s->else_body = block_until("endfor");
      loop_depth_ = saved;
    }
    return s;
  }

  StmtPtr parse_set(StmtPtr s) {
    next();  // set
    if (is_op("(")) {
      s->target = parse_target_names();
      s->target.is_tuple = true;
    } else {
      s->target.names.push_back(expect_name());
      if (skip_op(".")) {
        s->target.attribute = expect_name();
      } else if (is_op(",")) {
        while (skip_op(",")) s->target.names.push_back(expect_name());
        s->target.is_tuple = true;
      }
    }
    if (skip_op("=")) {
      s->kind = Stmt::Kind::kSet;
      s->expr = parse_tuple(true, {});
      expect_block_end();
      return s;
    }
    if (!s->target.attribute.empty() || s->target.is_tuple) unexpected("'='");
    s->kind = Stmt::Kind::kSetBlock;
    if (is_op("|")) parse_filter_chain(s->filters, false);
    expect_block_end();
    s->body = block_until("endset");
    return s;
  }

  StmtPtr parse_macro(StmtPtr s) {
    s->kind = Stmt::Kind::kMacro;
    next();  // macro
    s->text = expect_name();
    parse_signature(*s);
    expect_block_end();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = block_until("endmacro");
    loop_depth_ = saved;
    return s;
  }

  StmtPtr parse_call_block(StmtPtr s) {
    s->kind = Stmt::Kind::kCallBlock;
    s->text = "caller";
    next();  // call
    if (is_op("(")) parse_signature(*s);
    s->expr = parse_expression(true);
    if (s->expr->kind != Expr::Kind::kCall) fail("expected a call after {% call %}", s->line);
    expect_block_end();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = block_until("endcall");
    loop_depth_ = saved;
    return s;
  }

  /// `(name, name=default, ...)` of a macro or call block.
  void parse_signature(Stmt& s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s.params.empty()) expect_op(",");
      if (is_op(")")) break;
      s.params.push_back(expect_name());
      if (skip_op("=")) {
        s.defaults.push_back(parse_expression(true));
      } else if (!s.defaults.empty()) {
        fail("non-default argument follows default argument", cur().line);
      }
    }
    expect_op(")");
  }

  StmtPtr parse_with(StmtPtr s) {
    s->kind = Stmt::Kind::kScope;
    next();  // with
    while (cur().type != TokenType::kBlockEnd) {
      if (!s->assignments.empty()) expect_op(",");
      Target target;
      target.names.push_back(expect_name());
      expect_op("=");
      s->assignments.emplace_back(std::move(target), parse_expression(true));
    }
    expect_block_end();
    s->body = block_until("endwith");
    return s;
  }

  StmtPtr parse_filter_block(StmtPtr s) {
    s->kind = Stmt::Kind::kFilterBlock;
    next();  // filter
    parse_filter_chain(s->filters, true);
    expect_block_end();
    s->body = block_until("endfilter");
    return s;
  }

  // ---- expressions --------------------------------------------------------------------------
  bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
    const TokenType ty = cur().type;
    if (ty == TokenType::kVariableEnd || ty == TokenType::kBlockEnd || is_op(")")) return true;
    for (std::string_view e : extra_end)
      if (is_name(e)) return true;
    return false;
  }

  /// Jinja's parse_tuple: an expression, or several separated by commas (a tuple).
  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end,
                      bool explicit_parentheses = false) {
    const int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) unexpected("an expression");
    }
    auto e = make(Expr::Kind::kTuple, line);
    e->items = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    int line = cur().line;
    ExprPtr expr = parse_or();
    while (skip_name("if")) {
      auto c = make(Expr::Kind::kCondition, line);
      ExprPtr cond = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_condexpr() : nullptr;
      c->items.push_back(std::move(expr));
      c->items.push_back(std::move(cond));
      c->items.push_back(std::move(otherwise));
      expr = std::move(c);
      line = cur().line;
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const int line = next().line;
      auto e = make(Expr::Kind::kOr, line);
      e->items.push_back(std::move(left));
      e->items.push_back(parse_and());
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const int line = next().line;
      auto e = make(Expr::Kind::kAnd, line);
      e->items.push_back(std::move(left));
      e->items.push_back(parse_not());
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      const int line = next().line;
      auto e = make(Expr::Kind::kNot, line);
      e->items.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == TokenType::kOperator && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                                 cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && peek().type == TokenType::kName && peek().text == "in") {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Kind::kCompare, line);
        cmp->items.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->items.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right, int line) {
    auto e = make(Expr::Kind::kBinary, line);
    e->name = std::move(op);
    e->items.push_back(std::move(left));
    e->items.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& op = next();
      left = binary(op.text, std::move(left), parse_concat(), op.line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const Token& op = next();
      left = binary("~", std::move(left), parse_math2(), op.line);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& op = next();
      left = binary(op.text, std::move(left), parse_pow(), op.line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token& op = next();
      left = binary("**", std::move(left), parse_unary(true), op.line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const Token& op = next();
      node = make(op.text == "-" ? Expr::Kind::kNegate : Expr::Kind::kPlus, op.line);
      node->items.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    switch (tok.type) {
      case TokenType::kName: {
        next();
        if (tok.text == "true" || tok.text == "True" || tok.text == "false" || tok.text == "False") {
          auto e = make(Expr::Kind::kLiteral, tok.line);
          e->value = Value::boolean(tok.text == "true" || tok.text == "True");
          return e;
        }
        if (tok.text == "none" || tok.text == "None") {
          auto e = make(Expr::Kind::kLiteral, tok.line);
          e->value = Value::none();
          return e;
        }
        auto e = make(Expr::Kind::kName, tok.line);
        e->name = tok.text;
        return e;
      }
      case TokenType::kString: {
        std::string text;
        const int line = tok.line;
        while (cur().type == TokenType::kString) text += next().text;  // adjacent literals concatenate
        auto e = make(Expr::Kind::kLiteral, line);
        e->value = Value::string(std::move(text));
        return e;
      }
      case TokenType::kInteger: {
        next();
        auto e = make(Expr::Kind::kLiteral, tok.line);
        e->value = Value::integer(tok.integer);
        return e;
      }
      case TokenType::kFloat: {
        next();
        auto e = make(Expr::Kind::kLiteral, tok.line);
        e->value = Value::number(tok.number);
        return e;
      }
      case TokenType::kOperator:
        if (tok.text == "(") {
          next();
          ExprPtr e = parse_tuple(true, {}, true);
          expect_op(")");
          return e;
        }
        if (tok.text == "[") return parse_list();
        if (tok.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    fail("unexpected " + describe(tok), tok.line);
  }

  ExprPtr parse_list() {
    auto e = make(Expr::Kind::kList, next().line);
    while (!is_op("]")) {
      if (!e->items.empty()) expect_op(",");
      if (is_op("]")) break;
      e->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return e;
  }

  ExprPtr parse_dict() {
    auto e = make(Expr::Kind::kDict, next().line);
    while (!is_op("}")) {
      if (!e->items.empty()) expect_op(",");
      if (is_op("}")) break;
      e->items.push_back(parse_expression(true));
      expect_op(":");
      e->items.push_back(parse_expression(true));
    }
    expect_op("}");
    return e;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        std::vector<ExprPtr> chain;
        parse_filter_chain(chain, false);
        for (auto& f : chain) {
          f->items[0] = std::move(node);
          node = std::move(f);
        }
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& tok = next();
    if (tok.text == ".") {
      const Token& attr = next();
      if (attr.type == TokenType::kName) {
        auto e = make(Expr::Kind::kGetAttr, tok.line);
        e->name = attr.text;
        e->items.push_back(std::move(node));
        return e;
      }
      if (attr.type != TokenType::kInteger) fail("expected name or number after '.'", attr.line);
      auto index = make(Expr::Kind::kLiteral, attr.line);
      index->value = Value::integer(attr.integer);
      auto e = make(Expr::Kind::kGetItem, tok.line);
      e->items.push_back(std::move(node));
      e->items.push_back(std::move(index));
      return e;
    }
    ExprPtr sub = parse_subscribed(tok.line);
    if (is_op(",")) throw Error("unsupported construct: a subscript with several indices", tok.line);
    expect_op("]");
    if (sub->kind == Expr::Kind::kSlice) {
      sub->items[0] = std::move(node);
      return sub;
    }
    auto e = make(Expr::Kind::kGetItem, tok.line);
    e->items.push_back(std::move(node));
    e->items.push_back(std::move(sub));
    return e;
  }

  /// An index or a slice [start:stop:step] (a slice node with items[0] left for the object).
  ExprPtr parse_subscribed(int line) {
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    next();  // ':'
    auto slice = make(Expr::Kind::kSlice, line);
    slice->items.resize(4);
    slice->items[1] = std::move(start);
    if (!is_op(":") && !is_op("]") && !is_op(",")) slice->items[2] = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) slice->items[3] = parse_expression(true);
    }
    return slice;
  }

  void parse_call_args(Expr& e) {
    const int line = cur().line;
    expect_op("(");
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*")) {
        if (e.star_args || e.star_kwargs) fail("invalid syntax for function call expression", line);
        next();
        e.star_args = parse_expression(true);
      } else if (is_op("**")) {
        if (e.star_kwargs) fail("invalid syntax for function call expression", line);
        next();
        e.star_kwargs = parse_expression(true);
      } else if (cur().type == TokenType::kName && peek().type == TokenType::kOperator && peek().text == "=") {
        if (e.star_kwargs) fail("invalid syntax for function call expression", line);
        std::string key = next().text;
        next();  // '='
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.kwargs.empty() || e.star_args || e.star_kwargs)
          fail("invalid syntax for function call expression", line);
        e.args.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(Expr::Kind::kCall, cur().line);
    e->items.push_back(std::move(node));
    parse_call_args(*e);
    return e;
  }

  /// `| name(args) | name2 ...` (or, inline, `name(args) | ...` after {% filter %}); each
  /// filter node's items[0] is left null for the caller.
  void parse_filter_chain(std::vector<ExprPtr>& out, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      const int line = cur().line;
      std::string name = expect_name();
      while (skip_op(".")) name.append(".").append(expect_name());
      if (!is_supported_filter(name)) {
        if (is_unsupported_jinja_filter(name)) throw Error("unsupported construct: filter '" + name + "'", line);
        fail("no filter named '" + name + "'", line);
      }
      auto f = make(Expr::Kind::kFilter, line);
      f->name = name;
      f->items.emplace_back();
      if (is_op("(")) parse_call_args(*f);
      out.push_back(std::move(f));
    }
  }

  ExprPtr parse_test(ExprPtr node) {
    const int line = next().line;  // is
    const bool negated = skip_name("not");
    std::string name = expect_name();
    while (skip_op(".")) name.append(".").append(expect_name());
    if (!is_supported_test(name)) fail("no test named '" + name + "'", line);
    auto e = make(Expr::Kind::kTest, line);
    e->name = name;
    e->items.push_back(std::move(node));
    const TokenType ty = cur().type;
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((ty == TokenType::kName || ty == TokenType::kString || ty == TokenType::kInteger ||
                ty == TokenType::kFloat || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("you cannot chain multiple tests with is", cur().line);
      e->args.push_back(parse_postfix(parse_primary()));
    }
    if (!negated) return e;
    auto n = make(Expr::Kind::kNot, line);
    n->items.push_back(std::move(e));
    return n;
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Program parse_template(std::string_view source) { return Parser(tokenize(source)).run(); }

}  // namespace kvscope::jinja
