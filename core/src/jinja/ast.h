#pragma once
// The parsed template: expression and statement nodes, each with its template line (jinja/ internal).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace kvscope::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

/// An expression node. Which fields are used depends on `kind`.
struct Expr {
  enum class Kind {
    kLiteral,    ///< value
    kName,       ///< name
    kList,       ///< items
    kTuple,      ///< items
    kDict,       ///< items: key, value, key, value, ...
    kGetAttr,    ///< items[0].name
    kGetItem,    ///< items[0][items[1]]
    kSlice,      ///< items[0][items[1]:items[2]:items[3]] (null parts omitted)
    kCall,       ///< items[0](args..., kwargs...)
    kFilter,     ///< items[0] | name(args..., kwargs...)
    kTest,       ///< items[0] is name(args...)
    kNot,        ///< not items[0]
    kNegate,     ///< -items[0]
    kPlus,       ///< +items[0]
    kBinary,     ///< items[0] op items[1] (+ - * / // % ** ~)
    kCompare,    ///< items[0] ops[0] items[1] ops[1] items[2] ... (== != < <= > >= in notin)
    kAnd,        ///< items[0] and items[1]
    kOr,         ///< items[0] or items[1]
    kCondition,  ///< items[0] if items[1] else items[2] (items[2] may be null)
  };
  Kind kind;
  int line = 0;
  Value value;                                          // kLiteral
  std::string name;                                     // kName, kGetAttr, kFilter, kTest, kBinary (the operator)
  std::vector<ExprPtr> items;                           // operands (see Kind)
  std::vector<ExprPtr> args;                            // kCall, kFilter, kTest positional arguments
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // kCall, kFilter, kTest keyword arguments
  ExprPtr star_args;                                    // kCall, kFilter, kTest: *args (may be null)
  ExprPtr star_kwargs;                                  // kCall, kFilter, kTest: **kwargs (may be null)
  std::vector<std::string> ops;                         // kCompare
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

/// An assignment target: a name, `ns.attr`, or a tuple of names.
struct Target {
  std::vector<std::string> names;  // one name, or the names of a tuple
  std::string attribute;           // set: `names[0].attribute = ...` (a namespace)
  bool is_tuple = false;
};

/// A statement node. Which fields are used depends on `kind`.
struct Stmt {
  enum class Kind {
    kText,        ///< text
    kPrint,       ///< {{ expr }}
    kIf,          ///< conditions[i] -> bodies[i]; else_body
    kFor,         ///< for target in expr [if filter] body [else else_body]
    kSet,         ///< set target = expr
    kSetBlock,    ///< set target %} body {% endset (filters applied to the body's text)
    kMacro,       ///< macro name(params) body
    kCallBlock,   ///< call(params) expr %} body {% endcall: expr called with caller = the body
    kBreak,       ///< break
    kContinue,    ///< continue
    kScope,       ///< with / generation: body in a scope of its own; with's assignments
    kFilterBlock  ///< filter name(args) %} body {% endfilter
  };
  Kind kind;
  int line = 0;
  std::string text;                                     // kText; kMacro: name
  ExprPtr expr;                                         // kPrint, kFor (iterable), kSet, kCallBlock (a kCall)
  ExprPtr filter;                                       // kFor: the loop filter (`for x in xs if cond`)
  bool uses_loop = true;                                // kFor: whether the body mentions `loop` (else it is not built)
  Target target;                                        // kFor, kSet, kSetBlock
  std::vector<ExprPtr> conditions;                      // kIf
  std::vector<Body> bodies;                             // kIf: one per condition
  Body body;                                            // kFor, kSetBlock, kMacro, kCallBlock, kScope, kFilterBlock
  Body else_body;                                       // kIf, kFor
  std::vector<std::string> params;                      // kMacro, kCallBlock: parameter names
  std::vector<ExprPtr> defaults;                        // kMacro, kCallBlock: defaults of the last params
  std::vector<std::pair<Target, ExprPtr>> assignments;  // kScope (with)
  std::vector<ExprPtr> filters;  // kSetBlock, kFilterBlock: filter nodes applied in order (items[0] null)
};

/// A parsed template.
struct Program {
  Body body;
};

}  // namespace kvscope::jinja
