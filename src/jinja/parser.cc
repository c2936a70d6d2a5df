#include "jinja/parser.h"

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "jinja/builtins.h"
#include "jinja/lexer.h"
#include "jinja/parser_impl.h"

namespace promptcache::jinja {
namespace internal {

std::string Parser::Describe(const Token& t) {
  // Jinja2's descriptions of the tokens that have no text of their own.
  static constexpr std::pair<TokenType, const char*> kNames[] = {
      {TokenType::kEof, "end of template"},
      {TokenType::kBlockEnd, "end of statement block"},
      {TokenType::kVarEnd, "end of print statement"},
      {TokenType::kBlockBegin, "begin of statement block"},
      {TokenType::kVarBegin, "begin of print statement"},
      {TokenType::kData, "template data"},
      {TokenType::kString, "string"},
  };
  for (const auto& [type, name] : kNames) {
    if (t.type == type) return name;
  }
  return "'" + t.value + "'";
}

Status Parser::ExpectOp(std::string_view op) {
  if (SkipOp(op)) return Status::Ok();
  return Fail("expected '" + std::string(op) + "', got " + Describe(Cur()));
}

Status Parser::ExpectType(TokenType type) {
  if (Cur().type == type) {
    Advance();
    return Status::Ok();
  }
  Token want{type, ""};
  return Fail("expected " + Describe(want) + ", got " + Describe(Cur()));
}

Result<std::string> Parser::ExpectName() {
  if (Cur().type != TokenType::kName) return Fail("expected a name, got " + Describe(Cur()));
  std::string name = Cur().value;
  Advance();
  return name;
}

ExprPtr Parser::Make(ExprKind kind, int line) const {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

Status Parser::Seal(Expr& e) const {
  int depth = 0;
  for (const ExprPtr& a : e.args) depth = std::max(depth, a ? a->depth : 0);
  for (const auto& [k, a] : e.kwargs) depth = std::max(depth, a->depth);
  if (e.dyn_args) depth = std::max(depth, e.dyn_args->depth);
  if (e.dyn_kwargs) depth = std::max(depth, e.dyn_kwargs->depth);
  e.depth = depth + 1;
  if (e.depth > kMaxExprDepth) return Fail("expression nests too deep", e.line);
  return Status::Ok();
}

Result<ExprPtr> Parser::Node(ExprKind kind, int line, std::vector<ExprPtr> args, std::string name) {
  ExprPtr e = Make(kind, line);
  e->args = std::move(args);
  e->name = std::move(name);
  PC_RETURN_IF_ERROR(Seal(*e));
  return e;
}

StmtPtr Parser::StartStmt(StmtKind kind) {
  auto s = std::make_unique<Stmt>();
  s->kind = kind;
  s->line = Cur().line;
  Advance();
  return s;
}

// ---- Statements ------------------------------------------------------------------------------

Result<Body> Parser::ParseTemplate() {
  PC_ASSIGN_OR_RETURN(Body body, Subparse({}, /*has_end=*/false));
  if (Cur().type != TokenType::kEof) return Fail("unexpected " + Describe(Cur()));
  return body;
}

Result<Body> Parser::Subparse(Names end_names, bool has_end) {
  Body body;
  while (Cur().type != TokenType::kEof) {
    const Token& t = Cur();
    if (t.type == TokenType::kData) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kText;
      s->line = t.line;
      s->text = t.value;
      body.push_back(std::move(s));
      Advance();
    } else if (t.type == TokenType::kVarBegin) {
      const int line = t.line;
      Advance();
      PC_ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(false, true, {}, false));
      PC_RETURN_IF_ERROR(ExpectType(TokenType::kVarEnd));
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kOutput;
      s->line = line;
      s->exprs.push_back(std::move(e));
      body.push_back(std::move(s));
    } else if (t.type == TokenType::kBlockBegin) {
      Advance();
      if (has_end && Cur().type == TokenType::kName &&
          std::find(end_names.begin(), end_names.end(), Cur().value) != end_names.end()) {
        return body;
      }
      PC_ASSIGN_OR_RETURN(StmtPtr s, ParseStatement());
      body.push_back(std::move(s));
      PC_RETURN_IF_ERROR(ExpectType(TokenType::kBlockEnd));
    } else {
      return Fail("unexpected " + Describe(t));
    }
  }
  return body;
}

Result<Body> Parser::ParseStatements(Names end_names, bool drop_needle) {
  SkipOp(":");
  PC_RETURN_IF_ERROR(ExpectType(TokenType::kBlockEnd));
  PC_ASSIGN_OR_RETURN(Body body, Subparse(end_names, /*has_end=*/true));
  if (Cur().type == TokenType::kEof) {
    std::string want;
    for (std::string_view n : end_names)
      want += (want.empty() ? "'" : " or '") + std::string(n) + "'";
    return Fail("unexpected end of template, expected " + want);
  }
  if (drop_needle) Advance();
  return body;
}

Result<StmtPtr> Parser::ParseStatement() {
  Nest nest(&depth_);
  if (nest.too_deep()) return Fail("statements nest too deep");
  const Token& t = Cur();
  if (t.type != TokenType::kName) return Fail("tag name expected, got " + Describe(t));
  const std::string& tag = t.value;
  if (tag == "for") return ParseFor();
  if (tag == "if") return ParseIf();
  if (tag == "set") return ParseSet();
  if (tag == "macro") return ParseMacro();
  if (tag == "call") return ParseCallBlock();
  if (tag == "filter") return ParseFilterBlock();
  if (tag == "with") return ParseWith();
  if (tag == "print") return ParsePrint();
  auto s = std::make_unique<Stmt>();
  s->line = t.line;
  if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) return Fail("'" + tag + "' outside of a loop");
    s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    Advance();
    return s;
  }
  if (tag == "generation") {  // transformers' AssistantTracker: renders its body as is
    Advance();
    s->kind = StmtKind::kScope;
    PC_ASSIGN_OR_RETURN(s->body, ParseStatements({"endgeneration"}, true));
    return s;
  }
  if (tag == "block" || tag == "extends" || tag == "include" || tag == "import" || tag == "from" ||
      tag == "autoescape") {
    return Fail("'" + tag + "' tags are not supported (a chat template is rendered on its own)");
  }
  return Fail("unknown tag '" + tag + "'");
}

Result<StmtPtr> Parser::ParseFor() {
  StmtPtr s = StartStmt(StmtKind::kFor);
  PC_ASSIGN_OR_RETURN(s->target, ParseAssignTarget(true, false, {"in"}, false));
  if (!SkipName("in")) return Fail("expected 'in', got " + Describe(Cur()));
  PC_ASSIGN_OR_RETURN(s->expr, ParseTuple(false, false, {"recursive"}, false));
  if (SkipName("if")) {
    PC_ASSIGN_OR_RETURN(s->filter, ParseExpression());
  }
  if (IsName(Cur(), "recursive")) return Fail("recursive loops are not supported");
  ++loop_depth_;
  Result<Body> body = ParseStatements({"endfor", "else"}, false);
  --loop_depth_;
  if (!body.ok()) return body.status();
  s->body = std::move(*body);
  const bool has_else = IsName(Cur(), "else");
  Advance();
  if (has_else) {
    PC_ASSIGN_OR_RETURN(s->else_body, ParseStatements({"endfor"}, true));
  }
  return s;
}

Result<StmtPtr> Parser::ParseIf() {
  StmtPtr s = StartStmt(StmtKind::kIf);
  while (true) {
    PC_ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(false, false, {}, false));
    s->exprs.push_back(std::move(cond));
    PC_ASSIGN_OR_RETURN(Body body, ParseStatements({"elif", "else", "endif"}, false));
    s->bodies.push_back(std::move(body));
    const std::string tag = Cur().value;
    Advance();
    if (tag == "elif") continue;
    if (tag == "else") {
      PC_ASSIGN_OR_RETURN(s->else_body, ParseStatements({"endif"}, true));
    }
    return s;
  }
}

Result<StmtPtr> Parser::ParseSet() {
  auto s = std::make_unique<Stmt>();
  s->line = Cur().line;
  Advance();
  PC_ASSIGN_OR_RETURN(s->target, ParseAssignTarget(true, false, {}, true));
  if (SkipOp("=")) {
    s->kind = StmtKind::kSet;
    PC_ASSIGN_OR_RETURN(s->expr, ParseTuple(false, true, {}, false));
    return s;
  }
  s->kind = StmtKind::kSetBlock;
  if (IsOp(Cur(), "|")) {
    PC_ASSIGN_OR_RETURN(s->expr, ParseFilter(nullptr, false));
  }
  PC_ASSIGN_OR_RETURN(s->body, ParseStatements({"endset"}, true));
  return s;
}

// Whether an expression or statement reads `name` (a macro's varargs, kwargs, caller).
bool Reads(const Expr* e, std::string_view name);
bool Reads(const Body& body, std::string_view name);

bool Reads(const Expr* e, std::string_view name) {
  if (e == nullptr) return false;
  if (e->kind == ExprKind::kName && e->name == name) return true;
  for (const ExprPtr& a : e->args) {
    if (Reads(a.get(), name)) return true;
  }
  for (const auto& [k, a] : e->kwargs) {
    if (Reads(a.get(), name)) return true;
  }
  return Reads(e->dyn_args.get(), name) || Reads(e->dyn_kwargs.get(), name);
}

bool Reads(const Body& body, std::string_view name) {
  for (const StmtPtr& s : body) {
    for (const ExprPtr& e : s->exprs) {
      if (Reads(e.get(), name)) return true;
    }
    if (Reads(s->expr.get(), name) || Reads(s->filter.get(), name)) return true;
    for (const Body& b : s->bodies) {
      if (Reads(b, name)) return true;
    }
    if (Reads(s->body, name) || Reads(s->else_body, name)) return true;
    if (s->kind == StmtKind::kCallBlock && s->macro && Reads(s->macro->body, name)) return true;
  }
  return false;
}

Status Parser::ParseSignature(MacroDef& macro) {
  PC_RETURN_IF_ERROR(ExpectOp("("));
  while (!IsOp(Cur(), ")")) {
    if (!macro.params.empty()) PC_RETURN_IF_ERROR(ExpectOp(","));
    PC_ASSIGN_OR_RETURN(std::string param, ExpectName());
    if (IsConstantName(param)) return Fail("can't assign to '" + param + "'");
    if (SkipOp("=")) {
      PC_ASSIGN_OR_RETURN(ExprPtr d, ParseExpression());
      macro.defaults.push_back(std::move(d));
    } else if (!macro.defaults.empty()) {
      return Fail("non-default argument follows default argument");
    }
    macro.params.push_back(std::move(param));
  }
  return ExpectOp(")");
}

// The body of a macro or call block, up to `end_name`: outside any enclosing loop (break and
// continue cannot reach out of it), with the varargs and kwargs it reads noted.
Status Parser::ParseMacroBody(std::string_view end_name, MacroDef& macro) {
  const int loops = loop_depth_;
  loop_depth_ = 0;
  Result<Body> body = ParseStatements({end_name}, true);
  loop_depth_ = loops;
  if (!body.ok()) return body.status();
  macro.body = std::move(*body);
  macro.uses_varargs = Reads(macro.body, "varargs");
  macro.uses_kwargs = Reads(macro.body, "kwargs");
  return Status::Ok();
}

Result<StmtPtr> Parser::ParseMacro() {
  StmtPtr s = StartStmt(StmtKind::kMacro);
  s->macro = std::make_shared<MacroDef>();
  PC_ASSIGN_OR_RETURN(s->macro->name, ExpectName());
  PC_RETURN_IF_ERROR(ParseSignature(*s->macro));
  PC_RETURN_IF_ERROR(ParseMacroBody("endmacro", *s->macro));
  s->macro->uses_caller = Reads(s->macro->body, "caller");
  return s;
}

Result<StmtPtr> Parser::ParseCallBlock() {
  StmtPtr s = StartStmt(StmtKind::kCallBlock);
  s->macro = std::make_shared<MacroDef>();
  s->macro->name = "caller";
  if (IsOp(Cur(), "(")) PC_RETURN_IF_ERROR(ParseSignature(*s->macro));
  PC_ASSIGN_OR_RETURN(s->expr, ParseExpression());
  if (s->expr->kind != ExprKind::kCall) return Fail("expected call", s->line);
  PC_RETURN_IF_ERROR(ParseMacroBody("endcall", *s->macro));
  return s;
}

Result<StmtPtr> Parser::ParseFilterBlock() {
  StmtPtr s = StartStmt(StmtKind::kFilterBlock);
  PC_ASSIGN_OR_RETURN(s->expr, ParseFilter(nullptr, true));
  PC_ASSIGN_OR_RETURN(s->body, ParseStatements({"endfilter"}, true));
  return s;
}

Result<StmtPtr> Parser::ParseWith() {
  StmtPtr s = StartStmt(StmtKind::kWith);
  while (Cur().type != TokenType::kBlockEnd) {
    if (!s->targets.empty()) PC_RETURN_IF_ERROR(ExpectOp(","));
    PC_ASSIGN_OR_RETURN(Target t, ParseAssignTarget(true, false, {}, false));
    PC_RETURN_IF_ERROR(ExpectOp("="));
    PC_ASSIGN_OR_RETURN(ExprPtr v, ParseExpression());
    s->targets.push_back(std::move(t));
    s->exprs.push_back(std::move(v));
  }
  PC_ASSIGN_OR_RETURN(s->body, ParseStatements({"endwith"}, true));
  return s;
}

Result<StmtPtr> Parser::ParsePrint() {
  StmtPtr s = StartStmt(StmtKind::kOutput);
  while (Cur().type != TokenType::kBlockEnd) {
    if (!s->exprs.empty()) PC_RETURN_IF_ERROR(ExpectOp(","));
    PC_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression());
    s->exprs.push_back(std::move(e));
  }
  return s;
}

Result<Target> Parser::ParseAssignTarget(bool with_tuple, bool name_only, Names extra_end,
                                         bool with_namespace) {
  Target t;
  if (with_namespace && Cur().type == TokenType::kName && IsOp(Look(), ".")) {
    t.kind = Target::Kind::kNamespaceAttr;
    t.name = Cur().value;
    Advance();
    Advance();
    PC_ASSIGN_OR_RETURN(t.attr, ExpectName());
    return t;
  }
  if (name_only) {
    PC_ASSIGN_OR_RETURN(t.name, ExpectName());
    return t;
  }
  ExprPtr e;
  if (with_tuple) {
    PC_ASSIGN_OR_RETURN(e, ParseTuple(true, true, extra_end, false));
  } else {
    PC_ASSIGN_OR_RETURN(e, ParsePrimary());
  }
  return ToTarget(*e);
}

Result<Target> Parser::ToTarget(const Expr& e) const {
  Target t;
  if (e.kind == ExprKind::kName) {
    t.name = e.name;
    return t;
  }
  if (e.kind == ExprKind::kTuple) {
    t.kind = Target::Kind::kTuple;
    for (const ExprPtr& item : e.args) {
      PC_ASSIGN_OR_RETURN(Target sub, ToTarget(*item));
      t.items.push_back(std::move(sub));
    }
    return t;
  }
  return Fail("can't assign to this expression", e.line);
}

}  // namespace internal

Result<Body> Parse(std::string_view source) {
  PC_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  internal::Parser parser(std::move(tokens));
  return parser.ParseTemplate();
}

}  // namespace promptcache::jinja
