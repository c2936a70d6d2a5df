// The expression half of the parser: Jinja2's precedence climbing, from conditional expressions
// down to literals, subscripts, calls, filters and tests.
#include "jinja/builtins.h"
#include "jinja/parser_impl.h"

namespace promptcache::jinja::internal {

// ---- Expressions -----------------------------------------------------------------------------

bool Parser::IsTupleEnd(Names extra_end) const {
  const Token& t = Cur();
  if (t.type == TokenType::kVarEnd || t.type == TokenType::kBlockEnd || IsOp(t, ")")) return true;
  if (t.type != TokenType::kName) return false;
  return std::find(extra_end.begin(), extra_end.end(), t.value) != extra_end.end();
}

Result<ExprPtr> Parser::ParseTuple(bool simplified, bool with_condexpr, Names extra_end,
                                   bool explicit_parens) {
  const int line = Cur().line;
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) PC_RETURN_IF_ERROR(ExpectOp(","));
    if (IsTupleEnd(extra_end)) break;
    if (simplified) {
      PC_ASSIGN_OR_RETURN(ExprPtr e, ParsePrimary());
      args.push_back(std::move(e));
    } else {
      PC_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(with_condexpr));
      args.push_back(std::move(e));
    }
    if (!IsOp(Cur(), ",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parens) return Fail("expected an expression, got " + Describe(Cur()));
  }
  return Node(ExprKind::kTuple, line, std::move(args));
}

Result<ExprPtr> Parser::ParseExpression(bool with_condexpr) {
  Nest nest(&depth_);
  if (nest.too_deep()) return Fail("expression nests too deep");
  return with_condexpr ? ParseCondExpr() : ParseOr();
}

Result<ExprPtr> Parser::ParseCondExpr() {
  int line = Cur().line;
  PC_ASSIGN_OR_RETURN(ExprPtr expr1, ParseOr());
  while (SkipName("if")) {
    PC_ASSIGN_OR_RETURN(ExprPtr expr2, ParseOr());
    ExprPtr expr3;
    if (SkipName("else")) {
      PC_ASSIGN_OR_RETURN(expr3, ParseCondExpr());
    }
    PC_ASSIGN_OR_RETURN(expr1, Node(ExprKind::kCond, line,
                                    Args(std::move(expr2), std::move(expr1), std::move(expr3))));
    line = Cur().line;
  }
  return expr1;
}

// One left-associative level of binary operators: operands parsed by `operand`, joined while the
// cursor is on one of `ops`. kBinary nodes keep their operator as their name.
template <typename Operand>
Result<ExprPtr> Parser::ParseChain(ExprKind kind, Names ops, Operand operand) {
  PC_ASSIGN_OR_RETURN(ExprPtr left, operand());
  while (IsOneOf(Cur(), ops)) {
    const int line = Cur().line;
    std::string op = kind == ExprKind::kBinary ? Cur().value : "";
    Advance();
    PC_ASSIGN_OR_RETURN(ExprPtr right, operand());
    PC_ASSIGN_OR_RETURN(left,
                        Node(kind, line, Args(std::move(left), std::move(right)), std::move(op)));
  }
  return left;
}

Result<ExprPtr> Parser::ParseOr() {
  return ParseChain(ExprKind::kOr, {"or"}, [this] { return ParseAnd(); });
}

Result<ExprPtr> Parser::ParseAnd() {
  return ParseChain(ExprKind::kAnd, {"and"}, [this] { return ParseNot(); });
}

Result<ExprPtr> Parser::ParseNot() {
  Nest nest(&depth_);
  if (nest.too_deep()) return Fail("expression nests too deep");
  if (IsName(Cur(), "not")) {
    const int line = Cur().line;
    Advance();
    PC_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
    return Node(ExprKind::kNot, line, Args(std::move(operand)));
  }
  return ParseCompare();
}

Result<ExprPtr> Parser::ParseCompare() {
  const int line = Cur().line;
  PC_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
  ExprPtr cmp;
  while (true) {
    std::string op;
    const Token& t = Cur();
    if (t.type == TokenType::kOperator && (t.value == "==" || t.value == "!=" || t.value == "<" ||
                                           t.value == "<=" || t.value == ">" || t.value == ">=")) {
      op = t.value;
      Advance();
    } else if (IsName(t, "in")) {
      op = "in";
      Advance();
    } else if (IsName(t, "not") && IsName(Look(), "in")) {
      op = "notin";
      Advance();
      Advance();
    } else {
      break;
    }
    if (!cmp) {
      cmp = Make(ExprKind::kCompare, line);
      cmp->args.push_back(std::move(first));
    }
    PC_ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
    cmp->args.push_back(std::move(operand));
    cmp->ops.push_back(std::move(op));
  }
  if (!cmp) return first;
  PC_RETURN_IF_ERROR(Seal(*cmp));
  return cmp;
}

Result<ExprPtr> Parser::ParseMath1() {
  return ParseChain(ExprKind::kBinary, {"+", "-"}, [this] { return ParseConcat(); });
}

Result<ExprPtr> Parser::ParseConcat() {
  const int line = Cur().line;
  PC_ASSIGN_OR_RETURN(ExprPtr first, ParseMath2());
  if (!IsOp(Cur(), "~")) return first;
  std::vector<ExprPtr> args;
  args.push_back(std::move(first));
  while (SkipOp("~")) {
    PC_ASSIGN_OR_RETURN(ExprPtr next, ParseMath2());
    args.push_back(std::move(next));
  }
  return Node(ExprKind::kConcat, line, std::move(args));
}

Result<ExprPtr> Parser::ParseMath2() {
  return ParseChain(ExprKind::kBinary, {"*", "/", "//", "%"}, [this] { return ParsePow(); });
}

Result<ExprPtr> Parser::ParsePow() {
  return ParseChain(ExprKind::kBinary, {"**"}, [this] { return ParseUnary(true); });
}

Result<ExprPtr> Parser::ParseUnary(bool with_filter) {
  Nest nest(&depth_);
  if (nest.too_deep()) return Fail("expression nests too deep");
  const int line = Cur().line;
  ExprPtr node;
  if (IsOp(Cur(), "-") || IsOp(Cur(), "+")) {
    const ExprKind kind = Cur().value == "-" ? ExprKind::kNeg : ExprKind::kPos;
    Advance();
    PC_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
    PC_ASSIGN_OR_RETURN(node, Node(kind, line, Args(std::move(operand))));
  } else {
    PC_ASSIGN_OR_RETURN(node, ParsePrimary());
  }
  PC_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) {
    PC_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
  }
  return node;
}

Result<ExprPtr> Parser::ParsePrimary() {
  const Token& t = Cur();
  ExprPtr node = Make(ExprKind::kConst, t.line);
  switch (t.type) {
    case TokenType::kName:
      if (t.value == "true" || t.value == "True" || t.value == "false" || t.value == "False") {
        node->value = Value::Bool(t.value[0] == 't' || t.value[0] == 'T');
      } else if (t.value == "none" || t.value == "None") {
        node->value = Value::None();
      } else {
        node->kind = ExprKind::kName;
        node->name = t.value;
      }
      Advance();
      return node;
    case TokenType::kString: {
      std::string s;
      while (Cur().type == TokenType::kString) {
        s += Cur().value;
        Advance();
      }
      node->value = Value::Trusted(s);
      return node;
    }
    case TokenType::kInteger:
      node->value = Value::Int(t.integer);
      Advance();
      return node;
    case TokenType::kFloat:
      node->value = Value::Float(t.number);
      Advance();
      return node;
    default:
      break;
  }
  if (SkipOp("(")) {
    PC_ASSIGN_OR_RETURN(node, ParseTuple(false, true, {}, true));
    PC_RETURN_IF_ERROR(ExpectOp(")"));
    return node;
  }
  if (IsOp(t, "[")) return ParseList();
  if (IsOp(t, "{")) return ParseDict();
  return Fail("unexpected " + Describe(t));
}

Result<ExprPtr> Parser::ParseList() {
  const int line = Cur().line;
  Advance();
  std::vector<ExprPtr> items;
  while (!IsOp(Cur(), "]")) {
    if (!items.empty()) PC_RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp(Cur(), "]")) break;
    PC_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression());
    items.push_back(std::move(e));
  }
  PC_RETURN_IF_ERROR(ExpectOp("]"));
  return Node(ExprKind::kList, line, std::move(items));
}

Result<ExprPtr> Parser::ParseDict() {
  const int line = Cur().line;
  Advance();
  std::vector<ExprPtr> items;
  while (!IsOp(Cur(), "}")) {
    if (!items.empty()) PC_RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp(Cur(), "}")) break;
    PC_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression());
    PC_RETURN_IF_ERROR(ExpectOp(":"));
    PC_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
    items.push_back(std::move(key));
    items.push_back(std::move(value));
  }
  PC_RETURN_IF_ERROR(ExpectOp("}"));
  return Node(ExprKind::kDict, line, std::move(items));
}

Result<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    if (IsOp(Cur(), ".") || IsOp(Cur(), "[")) {
      PC_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
    } else if (IsOp(Cur(), "(")) {
      PC_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
    } else {
      return node;
    }
  }
}

Result<ExprPtr> Parser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (IsOp(Cur(), "|")) {
      PC_ASSIGN_OR_RETURN(node, ParseFilter(std::move(node), false));
    } else if (IsName(Cur(), "is")) {
      PC_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
    } else if (IsOp(Cur(), "(")) {
      PC_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
    } else {
      return node;
    }
  }
}

Result<ExprPtr> Parser::ParseSubscript(ExprPtr node) {
  const int line = Cur().line;
  std::vector<ExprPtr> args;
  args.push_back(std::move(node));
  if (SkipOp(".")) {
    const Token t = Cur();
    Advance();
    if (t.type == TokenType::kName) return Node(ExprKind::kGetAttr, line, std::move(args), t.value);
    if (t.type != TokenType::kInteger) return Fail("expected name or number", t.line);
    ExprPtr index = Make(ExprKind::kConst, t.line);
    index->value = Value::Int(t.integer);
    args.push_back(std::move(index));
    return Node(ExprKind::kGetItem, line, std::move(args));
  }
  Advance();  // [
  std::vector<ExprPtr> subs;
  while (!IsOp(Cur(), "]")) {
    if (!subs.empty()) PC_RETURN_IF_ERROR(ExpectOp(","));
    PC_ASSIGN_OR_RETURN(ExprPtr sub, ParseSubscribed());
    subs.push_back(std::move(sub));
  }
  PC_RETURN_IF_ERROR(ExpectOp("]"));
  if (subs.size() == 1) {
    args.push_back(std::move(subs[0]));
  } else {
    PC_ASSIGN_OR_RETURN(ExprPtr tuple, Node(ExprKind::kTuple, line, std::move(subs)));
    args.push_back(std::move(tuple));
  }
  return Node(ExprKind::kGetItem, line, std::move(args));
}

Result<ExprPtr> Parser::ParseSubscribed() {
  const int line = Cur().line;
  std::vector<ExprPtr> args;
  if (SkipOp(":")) {
    args.push_back(nullptr);
  } else {
    PC_ASSIGN_OR_RETURN(ExprPtr node, ParseExpression());
    if (!SkipOp(":")) return node;
    args.push_back(std::move(node));
  }
  if (IsOp(Cur(), ":") || IsOp(Cur(), "]") || IsOp(Cur(), ",")) {
    args.push_back(nullptr);
  } else {
    PC_ASSIGN_OR_RETURN(ExprPtr stop, ParseExpression());
    args.push_back(std::move(stop));
  }
  if (SkipOp(":") && !IsOp(Cur(), "]") && !IsOp(Cur(), ",")) {
    PC_ASSIGN_OR_RETURN(ExprPtr step, ParseExpression());
    args.push_back(std::move(step));
  } else {
    args.push_back(nullptr);
  }
  return Node(ExprKind::kSlice, line, std::move(args));
}

Status Parser::ParseCallArgs(Expr& call) {
  PC_RETURN_IF_ERROR(ExpectOp("("));
  bool require_comma = false;
  const auto invalid = [&] { return Fail("invalid syntax for function call expression"); };
  while (!IsOp(Cur(), ")")) {
    if (require_comma) {
      PC_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(Cur(), ")")) break;
    }
    if (SkipOp("*")) {
      if (call.dyn_args || call.dyn_kwargs) return invalid();
      PC_ASSIGN_OR_RETURN(call.dyn_args, ParseExpression());
    } else if (SkipOp("**")) {
      if (call.dyn_kwargs) return invalid();
      PC_ASSIGN_OR_RETURN(call.dyn_kwargs, ParseExpression());
    } else if (Cur().type == TokenType::kName && IsOp(Look(), "=")) {
      if (call.dyn_kwargs) return invalid();
      std::string key = Cur().value;
      Advance();
      Advance();
      PC_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      call.kwargs.emplace_back(std::move(key), std::move(value));
    } else {
      if (call.dyn_args || call.dyn_kwargs || !call.kwargs.empty()) return invalid();
      PC_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      call.args.push_back(std::move(value));
    }
    require_comma = true;
  }
  return ExpectOp(")");
}

Result<ExprPtr> Parser::ParseCall(ExprPtr node) {
  ExprPtr call = Make(ExprKind::kCall, Cur().line);
  call->args.push_back(std::move(node));
  PC_RETURN_IF_ERROR(ParseCallArgs(*call));
  PC_RETURN_IF_ERROR(Seal(*call));
  return call;
}

Result<ExprPtr> Parser::ParseFilter(ExprPtr node, bool start_inline) {
  while (IsOp(Cur(), "|") || start_inline) {
    if (!start_inline) Advance();
    start_inline = false;
    const int line = Cur().line;
    PC_ASSIGN_OR_RETURN(std::string name, ExpectName());
    while (SkipOp(".")) {
      PC_ASSIGN_OR_RETURN(std::string part, ExpectName());
      name += "." + part;
    }
    if (!IsFilterName(name)) return Fail("no filter named '" + name + "'", line);
    ExprPtr filter = Make(ExprKind::kFilter, line);
    filter->name = std::move(name);
    filter->args.push_back(std::move(node));
    if (IsOp(Cur(), "(")) PC_RETURN_IF_ERROR(ParseCallArgs(*filter));
    PC_RETURN_IF_ERROR(Seal(*filter));
    node = std::move(filter);
  }
  return node;
}

Result<ExprPtr> Parser::ParseTest(ExprPtr node) {
  const int line = Cur().line;
  Advance();  // is
  const bool negated = SkipName("not");
  PC_ASSIGN_OR_RETURN(std::string name, ExpectName());
  while (SkipOp(".")) {
    PC_ASSIGN_OR_RETURN(std::string part, ExpectName());
    name += "." + part;
  }
  if (!IsTestName(name)) return Fail("no test named '" + name + "'", line);
  ExprPtr test = Make(ExprKind::kTest, line);
  test->name = std::move(name);
  test->args.push_back(std::move(node));
  const Token& t = Cur();
  if (IsOp(t, "(")) {
    PC_RETURN_IF_ERROR(ParseCallArgs(*test));
  } else if ((t.type == TokenType::kName || t.type == TokenType::kString ||
              t.type == TokenType::kInteger || t.type == TokenType::kFloat || IsOp(t, "[") ||
              IsOp(t, "{")) &&
             !IsName(t, "else") && !IsName(t, "or") && !IsName(t, "and")) {
    if (IsName(t, "is")) return Fail("you cannot chain multiple tests with is");
    PC_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
    PC_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
    test->args.push_back(std::move(arg));
  }
  PC_RETURN_IF_ERROR(Seal(*test));
  if (!negated) return test;
  return Node(ExprKind::kNot, line, Args(std::move(test)));
}

}  // namespace promptcache::jinja::internal
