// The Parser class shared by parser.cc (statements) and parse_expr.cc (expressions); internal to
// the interpreter.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"

namespace promptcache::jinja::internal {

inline bool IsConstantName(std::string_view n) {
  return n == "true" || n == "false" || n == "True" || n == "False" || n == "none" || n == "None";
}

// A node's argument list from its operands (a braced list cannot hold move-only ExprPtrs).
template <typename... Operands>
std::vector<ExprPtr> Args(Operands... operands) {
  std::vector<ExprPtr> args;
  args.reserve(sizeof...(operands));
  (args.push_back(std::move(operands)), ...);
  return args;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Result<Body> ParseTemplate();

 private:
  using Names = std::initializer_list<std::string_view>;

  // Counts one level of recursion for as long as it lives.
  class Nest {
   public:
    explicit Nest(int* depth) : depth_(depth) { ++*depth_; }
    ~Nest() { --*depth_; }
    bool too_deep() const { return *depth_ > kMaxParseDepth; }

   private:
    int* depth_;
  };

  const Token& Cur() const { return tokens_[pos_]; }
  const Token& Look() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  void Advance() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  static bool IsName(const Token& t, std::string_view v) {
    return t.type == TokenType::kName && t.value == v;
  }
  static bool IsOp(const Token& t, std::string_view op) {
    return t.type == TokenType::kOperator && t.value == op;
  }
  bool SkipName(std::string_view v) {
    if (!IsName(Cur(), v)) return false;
    Advance();
    return true;
  }
  // An operator or a name (and, or) that is one of `ops`.
  static bool IsOneOf(const Token& t, Names ops) {
    return (t.type == TokenType::kOperator || t.type == TokenType::kName) &&
           std::find(ops.begin(), ops.end(), t.value) != ops.end();
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(Cur(), op)) return false;
    Advance();
    return true;
  }
  static std::string Describe(const Token& t);
  Status Fail(const std::string& message, int line = 0) const {
    return InvalidArgument("line " + std::to_string(line > 0 ? line : Cur().line) + ": " + message);
  }
  Status ExpectOp(std::string_view op);
  Status ExpectType(TokenType type);
  Result<std::string> ExpectName();
  ExprPtr Make(ExprKind kind, int line) const;
  // Sets e's depth from its children; fails past kMaxExprDepth.
  Status Seal(Expr& e) const;
  Result<ExprPtr> Node(ExprKind kind, int line, std::vector<ExprPtr> args, std::string name = {});
  // A statement of `kind` at the tag under the cursor, with the cursor moved past the tag.
  StmtPtr StartStmt(StmtKind kind);

  // Statements.
  Result<Body> Subparse(Names end_names, bool has_end);
  Result<Body> ParseStatements(Names end_names, bool drop_needle);
  Result<StmtPtr> ParseStatement();
  Result<StmtPtr> ParseFor();
  Result<StmtPtr> ParseIf();
  Result<StmtPtr> ParseSet();
  Result<StmtPtr> ParseMacro();
  Result<StmtPtr> ParseCallBlock();
  Result<StmtPtr> ParseFilterBlock();
  Result<StmtPtr> ParseWith();
  Result<StmtPtr> ParsePrint();
  Status ParseSignature(MacroDef& macro);
  Status ParseMacroBody(std::string_view end_name, MacroDef& macro);
  Result<Target> ParseAssignTarget(bool with_tuple, bool name_only, Names extra_end,
                                   bool with_namespace);
  Result<Target> ToTarget(const Expr& e) const;

  // Expressions.
  bool IsTupleEnd(Names extra_end) const;
  Result<ExprPtr> ParseTuple(bool simplified, bool with_condexpr, Names extra_end,
                             bool explicit_parens);
  Result<ExprPtr> ParseExpression(bool with_condexpr = true);
  Result<ExprPtr> ParseCondExpr();
  template <typename Operand>
  Result<ExprPtr> ParseChain(ExprKind kind, Names ops, Operand operand);
  Result<ExprPtr> ParseOr();
  Result<ExprPtr> ParseAnd();
  Result<ExprPtr> ParseNot();
  Result<ExprPtr> ParseCompare();
  Result<ExprPtr> ParseMath1();
  Result<ExprPtr> ParseConcat();
  Result<ExprPtr> ParseMath2();
  Result<ExprPtr> ParsePow();
  Result<ExprPtr> ParseUnary(bool with_filter);
  Result<ExprPtr> ParsePrimary();
  Result<ExprPtr> ParseList();
  Result<ExprPtr> ParseDict();
  Result<ExprPtr> ParsePostfix(ExprPtr node);
  Result<ExprPtr> ParseFilterExpr(ExprPtr node);
  Result<ExprPtr> ParseSubscript(ExprPtr node);
  Result<ExprPtr> ParseSubscribed();
  Status ParseCallArgs(Expr& call);
  Result<ExprPtr> ParseCall(ExprPtr node);
  Result<ExprPtr> ParseFilter(ExprPtr node, bool start_inline);
  Result<ExprPtr> ParseTest(ExprPtr node);

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;  // enclosing for loops, for break and continue
};

}  // namespace promptcache::jinja::internal
