// The syntax tree of a parsed Jinja template: expressions and statements, as Jinja2's parser
// builds them (same precedence, same statements), so the interpreter can evaluate them with
// Jinja2's semantics. Nodes are immutable once parsed and shared by every render.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace promptcache::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  kConst,    // value
  kName,     // name
  kGetAttr,  // args[0].name
  kGetItem,  // args[0][args[1]]
  kSlice,    // args[0], args[1], args[2]: start, stop, step (null when left out)
  kCall,     // args[0](args[1..], kwargs, *dyn_args, **dyn_kwargs)
  kFilter,   // args[0] | name(args[1..]); args[0] null: the body of a filter block
  kTest,     // args[0] is name(args[1..])
  kNeg,      // -args[0]
  kPos,      // +args[0]
  kNot,      // not args[0]
  kBinary,   // args[0] op args[1]: + - * / // % **
  kAnd,      // args[0] and args[1]
  kOr,       // args[0] or args[1]
  kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ... (Python's chained comparison)
  kCond,     // args[1] if args[0] else args[2] (null: undefined)
  kConcat,   // args[0] ~ args[1] ~ ...
  kList,
  kTuple,
  kDict,  // args: key, value, key, value, ...
};

struct Expr {
  ExprKind kind;
  int line = 0;
  int depth = 1;     // 1 + the deepest child: bounded by the parser, so evaluation cannot overflow
  Value value;       // kConst
  std::string name;  // kName, kGetAttr, kFilter, kTest; kBinary: the operator
  std::vector<ExprPtr> args;
  std::vector<std::string> ops;  // kCompare: "==", "!=", "<", "<=", ">", ">=", "in", "notin"
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // kCall, kFilter, kTest
  ExprPtr dyn_args, dyn_kwargs;                         // *args, **kwargs
};

// Where {% for %}, {% set %} and {% with %} store values: a name, a tuple of targets to unpack,
// or a namespace attribute (ns.attr).
struct Target {
  enum class Kind { kName, kTuple, kNamespaceAttr };
  Kind kind = Kind::kName;
  std::string name;  // kName: the variable; kNamespaceAttr: the namespace variable
  std::string attr;  // kNamespaceAttr
  std::vector<Target> items;
};

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
  bool uses_varargs = false;  // the body reads `varargs` / `kwargs` / `caller`
  bool uses_kwargs = false;
  bool uses_caller = false;
};

enum class StmtKind {
  kText,         // text
  kOutput,       // {{ expr }}; {% print a, b %}: exprs
  kIf,           // conds[i] -> bodies[i]; else_body
  kFor,          // for target in expr [if filter] ... else
  kSet,          // set target = expr
  kSetBlock,     // set target [| filters] ... endset
  kMacro,        // macro
  kCallBlock,    // call(params) expr ... endcall
  kFilterBlock,  // filter filters ... endfilter
  kWith,         // with targets = exprs ... endwith
  kBreak,
  kContinue,
  kScope,  // a body run as is ({% generation %})
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;                 // kText
  std::vector<ExprPtr> exprs;       // kOutput; kIf: conditions; kWith: values
  ExprPtr expr;                     // kFor: the iterable; kSet: the value; kCallBlock: the call;
                                    // kSetBlock/kFilterBlock: the filter chain (null: none)
  ExprPtr filter;                   // kFor: the `if` condition
  Target target;                    // kFor, kSet, kSetBlock
  std::vector<Target> targets;      // kWith
  std::vector<Body> bodies;         // kIf: one per condition
  Body body;                        // kFor, kSetBlock, kFilterBlock, kWith, kScope
  Body else_body;                   // kIf, kFor
  std::shared_ptr<MacroDef> macro;  // kMacro; kCallBlock: the caller's signature and body
};

}  // namespace promptcache::jinja
