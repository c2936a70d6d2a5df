// The tree-walking evaluator behind Template::Render: scopes (Jinja2's: a for-loop iteration, a
// macro call and a with block get their own, an if does not; macros see their defining scope at
// call time), statements, expressions and Python's operators on Values. Builtins call back into it
// for attribute access, calls, filters and the render's budgets.
//
// One Interpreter runs one render and is thrown away; the syntax tree it walks is shared and never
// modified, so renders of one Template may run on several threads at once.
#pragma once

#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "jinja/ast.h"
#include "jinja/limits.h"
#include "jinja/value.h"

namespace promptcache::jinja {

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  // The innermost variable of that name, or nullptr.
  const Value* Find(std::string_view name) const;
  void Set(std::string_view name, Value value);
  void Clear() {
    vars_.clear();
    parent_.reset();
  }

 private:
  std::shared_ptr<Scope> parent_;
  std::vector<std::pair<std::string, Value>> vars_;
};

class Interpreter;

// A Python generator: what Jinja2's map, select, unique, items, ... filters return. It can be
// iterated once (then it is empty), is always true, and has no length, index or JSON form.
class Generator : public Object {
 public:
  explicit Generator(std::vector<Value> items) : items_(std::move(items)) {}
  std::string_view TypeName() const override { return "generator"; }
  Value GetAttr(std::string_view name) override {
    return Value::Undefined("'generator object' has no attribute '" + std::string(name) + "'");
  }
  Status AppendRepr(TextBuilder& out, int depth) const override {
    out.AppendTrusted("<generator object>");
    return Status::Ok();
  }
  void Clear() override { items_.clear(); }
  // The items not consumed yet, consuming them.
  std::vector<Value> TakeAll();
  // The next item, if any.
  std::optional<Value> TakeOne();

 private:
  std::vector<Value> items_;
  size_t next_ = 0;
};

// A {% macro %} (or the body of a {% call %} block, named "caller") bound to the scope it was
// defined in.
class Macro : public Callable {
 public:
  Macro(std::shared_ptr<const MacroDef> def, std::shared_ptr<Scope> scope)
      : def_(std::move(def)), scope_(std::move(scope)) {}
  std::string_view name() const override { return def_->name; }
  Result<Value> Call(Interpreter& in, CallArgs args) const override;
  std::string Repr() const override { return "<Macro '" + def_->name + "'>"; }

  const MacroDef& def() const { return *def_; }
  const std::shared_ptr<Scope>& scope() const { return scope_; }

 private:
  std::shared_ptr<const MacroDef> def_;
  std::shared_ptr<Scope> scope_;
};

class Interpreter {
 public:
  using Clock = std::function<std::tm()>;
  Interpreter(const std::unordered_map<std::string, Value>& globals, const Limits& limits,
              Clock now);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  Result<Text> Run(const Body& body);

  // For builtins.
  const Limits& limits() const { return limits_; }
  std::tm Now() const { return now_(); }
  // Counts `bytes` against the render's allocation budget.
  Status Account(size_t bytes);
  // Counts `n` steps of work against the render's budget.
  Status Charge(int64_t n);
  Result<Value> NewList(std::vector<Value> items, bool tuple = false);
  Result<Value> NewDict(DictData dict);
  Value NewGenerator(std::vector<Value> items);
  // Objects that can take part in reference cycles (a namespace that holds itself, a macro held in
  // the scope it captures): when the render ends, those still alive drop their values.
  Status Track(const std::shared_ptr<Object>& object);
  Status TrackScope(const std::shared_ptr<Scope>& scope);
  Result<Value> Call(const Value& callee, CallArgs args);
  Result<Value> CallMacro(const Macro& macro, CallArgs args);
  Result<Value> GetAttr(const Value& obj, std::string_view name);
  Result<Value> GetItem(const Value& obj, const Value& key);
  // The items a for loop over v visits: list items, dict keys, a string's characters; none for
  // Undefined. InvalidArgument for values Python cannot iterate.
  Result<std::vector<Value>> Iterate(const Value& v);
  // Python's `item in container`.
  Result<bool> Contains(const Value& container, const Value& item);
  Result<Value> Binary(std::string_view op, const Value& a, const Value& b);

 private:
  // Replaces the current scope or output for as long as it lives.
  class ScopeSwap;
  class OutputSwap;
  // Counts one level of nested evaluation for as long as it lives.
  class DepthGuard {
   public:
    explicit DepthGuard(Interpreter* in) : in_(in) { ++in_->depth_; }
    ~DepthGuard() { --in_->depth_; }
    bool too_deep() const { return in_->depth_ > in_->limits_.max_depth; }

   private:
    Interpreter* in_;
  };

  // What entering an expression or statement at `line` checks: the depth `guard` counts, within
  // the limit, and one step of work charged.
  Status Enter(const DepthGuard& guard, int line);

  enum class Control { kNone, kBreak, kContinue };

  Status Exec(const Body& body);
  Status Exec(const Stmt& s);
  Status ExecOutput(const Stmt& s);
  Status ExecFor(const Stmt& s);
  Status ExecSetBlock(const Stmt& s);
  Status ExecCallBlock(const Stmt& s);
  Status ExecFilterBlock(const Stmt& s);
  Status ExecWith(const Stmt& s);
  // The output of `body` run in a child scope.
  Result<Text> Capture(const Body& body);
  Status Assign(const Target& target, const Value& value, Scope& scope);

  Result<Value> Eval(const Expr& e);
  Result<Value> EvalInner(const Expr& e);
  Result<Value> EvalGetItem(const Expr& e);
  Result<Value> EvalSlice(const Value& obj, const Expr& slice);
  Result<CallArgs> EvalArgs(const Expr& e, size_t first);
  Result<Value> EvalCall(const Expr& e);
  Result<Value> EvalFilter(const Expr& e, const Value* input);
  Result<Value> EvalCompare(const Expr& e);
  Result<Value> EvalUnary(const Expr& e);
  Result<Value> EvalLiteral(const Expr& e);
  Value Lookup(std::string_view name) const;
  Status Locate(Status status, int line);

  const std::unordered_map<std::string, Value>& globals_;
  Limits limits_;
  Clock now_;
  std::shared_ptr<Scope> scope_;
  TextBuilder* out_ = nullptr;
  Control control_ = Control::kNone;
  int depth_ = 0;
  int64_t steps_ = 0;
  size_t created_ = 0;
  bool located_ = false;  // the error being returned already names its line
  std::vector<std::weak_ptr<Object>> objects_;
  std::vector<std::weak_ptr<Scope>> macro_scopes_;
};

}  // namespace promptcache::jinja
