#include "jinja/interpreter.h"

#include <algorithm>

#include "jinja/builtins.h"

namespace promptcache::jinja {

const Value* Scope::Find(std::string_view name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent_.get()) {
    for (const auto& [n, v] : s->vars_) {
      if (n == name) return &v;
    }
  }
  return nullptr;
}

void Scope::Set(std::string_view name, Value value) {
  for (auto& [n, v] : vars_) {
    if (n == name) {
      v = std::move(value);
      return;
    }
  }
  vars_.emplace_back(std::string(name), std::move(value));
}

std::vector<Value> Generator::TakeAll() {
  std::vector<Value> rest(items_.begin() + static_cast<std::ptrdiff_t>(next_), items_.end());
  next_ = items_.size();
  return rest;
}

std::optional<Value> Generator::TakeOne() {
  if (next_ >= items_.size()) return std::nullopt;
  return items_[next_++];
}

Result<Value> Macro::Call(Interpreter& in, CallArgs args) const {
  return in.CallMacro(*this, std::move(args));
}

namespace {

// The `loop` variable of a for loop. One object serves every iteration, as in Jinja2.
class LoopContext : public Object, public std::enable_shared_from_this<LoopContext> {
 public:
  explicit LoopContext(std::vector<Value> items) : items_(std::move(items)) {}
  void set_index(size_t i) { index_ = i; }
  const Value& item(size_t i) const { return items_[i]; }
  std::string_view TypeName() const override { return "LoopContext"; }
  Value GetAttr(std::string_view name) override;
  Status AppendRepr(TextBuilder& out, int depth) const override {
    out.AppendTrusted("<LoopContext " + std::to_string(index_ + 1) + "/" +
                      std::to_string(items_.size()) + ">");
    return Status::Ok();
  }
  void Clear() override {
    items_.clear();
    last_changed_.reset();
  }

  // loop.cycle(a, b, ...) and loop.changed(a, ...).
  class Method : public Callable {
   public:
    Method(std::shared_ptr<LoopContext> loop, bool cycle) : loop_(std::move(loop)), cycle_(cycle) {}
    std::string_view name() const override { return cycle_ ? "cycle" : "changed"; }
    Result<Value> Call(Interpreter& in, CallArgs args) const override;

   private:
    std::shared_ptr<LoopContext> loop_;
    bool cycle_;
  };

 private:
  std::vector<Value> items_;
  size_t index_ = 0;
  std::optional<std::vector<Value>> last_changed_;
};

Value LoopContext::GetAttr(std::string_view name) {
  const int64_t i = static_cast<int64_t>(index_);
  const int64_t n = static_cast<int64_t>(items_.size());
  if (name == "index") return Value::Int(i + 1);
  if (name == "index0") return Value::Int(i);
  if (name == "revindex") return Value::Int(n - i);
  if (name == "revindex0") return Value::Int(n - i - 1);
  if (name == "first") return Value::Bool(i == 0);
  if (name == "last") return Value::Bool(i + 1 == n);
  if (name == "length") return Value::Int(n);
  if (name == "depth") return Value::Int(1);
  if (name == "depth0") return Value::Int(0);
  if (name == "previtem") {
    return i > 0 ? items_[index_ - 1] : Value::Undefined("there is no previous item");
  }
  if (name == "nextitem") {
    return i + 1 < n ? items_[index_ + 1] : Value::Undefined("there is no next item");
  }
  if (name == "cycle" || name == "changed") {
    return Value::MakeCallable(std::make_shared<Method>(shared_from_this(), name == "cycle"));
  }
  return Value::Undefined("'LoopContext object' has no attribute '" + std::string(name) + "'");
}

Result<Value> LoopContext::Method::Call(Interpreter& in, CallArgs args) const {
  if (!args.keyword.empty())
    return InvalidArgument("loop." + std::string(name()) + "() takes no keyword arguments");
  if (cycle_) {
    if (args.positional.empty()) return InvalidArgument("no items for cycling given");
    return args.positional[loop_->index_ % args.positional.size()];
  }
  const bool changed = !loop_->last_changed_.has_value() ||
                       loop_->last_changed_->size() != args.positional.size() ||
                       !std::equal(args.positional.begin(), args.positional.end(),
                                   loop_->last_changed_->begin(), Equal);
  loop_->last_changed_ = std::move(args.positional);
  return Value::Bool(changed);
}

}  // namespace

class Interpreter::ScopeSwap {
 public:
  ScopeSwap(Interpreter* in, std::shared_ptr<Scope> scope)
      : in_(in), saved_(std::move(in->scope_)) {
    in_->scope_ = std::move(scope);
  }
  ~ScopeSwap() { in_->scope_ = std::move(saved_); }

 private:
  Interpreter* in_;
  std::shared_ptr<Scope> saved_;
};

class Interpreter::OutputSwap {
 public:
  OutputSwap(Interpreter* in, TextBuilder* out) : in_(in), saved_(in->out_) { in_->out_ = out; }
  ~OutputSwap() { in_->out_ = saved_; }

 private:
  Interpreter* in_;
  TextBuilder* saved_;
};

Interpreter::Interpreter(const std::unordered_map<std::string, Value>& globals,
                         const Limits& limits, Clock now)
    : globals_(globals), limits_(limits), now_(std::move(now)) {}

Interpreter::~Interpreter() {
  // Values can refer to themselves through namespaces, loops and macros (whose scope holds the
  // macro): empty every such holder so that everything is freed, without deep recursion.
  for (const auto& o : objects_) {
    if (std::shared_ptr<Object> alive = o.lock()) alive->Clear();
  }
  for (const auto& s : macro_scopes_) {
    if (std::shared_ptr<Scope> alive = s.lock()) alive->Clear();
  }
  if (scope_) scope_->Clear();
}

Result<Text> Interpreter::Run(const Body& body) {
  scope_ = std::make_shared<Scope>(nullptr);
  PC_RETURN_IF_ERROR(TrackScope(scope_));
  TextBuilder out(limits_.max_output_bytes);
  out_ = &out;
  PC_RETURN_IF_ERROR(Exec(body));
  if (out.overflow()) {
    return ResourceExhausted("the rendered text is longer than " +
                             std::to_string(limits_.max_output_bytes) + " bytes");
  }
  return out.Finish();
}

Status Interpreter::Account(size_t bytes) {
  created_ += bytes;
  if (created_ > limits_.max_created_bytes) {
    return ResourceExhausted("the template built more than " +
                             std::to_string(limits_.max_created_bytes >> 20) +
                             " MiB of strings and lists");
  }
  return Status::Ok();
}

Status Interpreter::Charge(int64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps) {
    return ResourceExhausted("the template ran more than " + std::to_string(limits_.max_steps) +
                             " steps");
  }
  return Status::Ok();
}

Result<Value> Interpreter::NewList(std::vector<Value> items, bool tuple) {
  if (items.size() > limits_.max_list_items) {
    return ResourceExhausted("a list grew past " + std::to_string(limits_.max_list_items) +
                             " items");
  }
  PC_RETURN_IF_ERROR(Account(items.size() * sizeof(Value)));
  return Value::List(std::move(items), tuple);
}

Result<Value> Interpreter::NewDict(DictData dict) {
  if (dict.entries.size() > limits_.max_list_items) {
    return ResourceExhausted("a dict grew past " + std::to_string(limits_.max_list_items) +
                             " items");
  }
  PC_RETURN_IF_ERROR(Account(dict.entries.size() * 2 * sizeof(Value)));
  return Value::Dict(std::move(dict));
}

Value Interpreter::NewGenerator(std::vector<Value> items) {
  return Value::MakeObject(std::make_shared<Generator>(std::move(items)));
}

namespace {

// Drops the expired entries of a registry when it has doubled since the last time, so that it
// holds about as many entries as there are live objects.
template <typename T>
void Register(std::vector<std::weak_ptr<T>>& registry, const std::shared_ptr<T>& p) {
  if (registry.size() >= 64 && (registry.size() & (registry.size() - 1)) == 0) {
    registry.erase(std::remove_if(registry.begin(), registry.end(),
                                  [](const std::weak_ptr<T>& w) { return w.expired(); }),
                   registry.end());
  }
  if (registry.empty() || registry.back().lock() != p) registry.push_back(p);
}

}  // namespace

Status Interpreter::Track(const std::shared_ptr<Object>& object) {
  Register(objects_, object);
  return Account(256);
}

Status Interpreter::TrackScope(const std::shared_ptr<Scope>& scope) {
  Register(macro_scopes_, scope);
  return Account(256);
}

Value Interpreter::Lookup(std::string_view name) const {
  if (const Value* v = scope_->Find(name)) return *v;
  if (auto it = globals_.find(std::string(name)); it != globals_.end()) return it->second;
  return Value::Undefined("'" + std::string(name) + "' is undefined");
}

Status Interpreter::Locate(Status status, int line) {
  if (status.ok() || located_) return status;
  located_ = true;
  return Status(status.code(), "line " + std::to_string(line) + ": " + status.message());
}

// ---- Statements ------------------------------------------------------------------------------

Status Interpreter::Exec(const Body& body) {
  for (const StmtPtr& s : body) {
    PC_RETURN_IF_ERROR(Exec(*s));
    if (control_ != Control::kNone) return Status::Ok();
  }
  return Status::Ok();
}

Status Interpreter::Enter(const DepthGuard& guard, int line) {
  if (guard.too_deep()) {
    return Locate(ResourceExhausted("template calls nest deeper than " +
                                    std::to_string(limits_.max_depth) + " levels"),
                  line);
  }
  return Locate(Charge(1), line);
}

Status Interpreter::Exec(const Stmt& s) {
  DepthGuard guard(this);
  PC_RETURN_IF_ERROR(Enter(guard, s.line));
  switch (s.kind) {
    case StmtKind::kText:
      out_->AppendTrusted(s.text);
      return Status::Ok();
    case StmtKind::kOutput:
      return ExecOutput(s);
    case StmtKind::kIf:
      for (size_t i = 0; i < s.exprs.size(); ++i) {
        PC_ASSIGN_OR_RETURN(Value cond, Eval(*s.exprs[i]));
        if (Truthy(cond)) return Exec(s.bodies[i]);
      }
      return Exec(s.else_body);
    case StmtKind::kFor:
      return ExecFor(s);
    case StmtKind::kSet: {
      PC_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
      return Locate(Assign(s.target, v, *scope_), s.line);
    }
    case StmtKind::kSetBlock:
      return ExecSetBlock(s);
    case StmtKind::kMacro:
      PC_RETURN_IF_ERROR(Locate(TrackScope(scope_), s.line));
      scope_->Set(s.macro->name, Value::MakeCallable(std::make_shared<Macro>(s.macro, scope_)));
      return Status::Ok();
    case StmtKind::kCallBlock:
      return ExecCallBlock(s);
    case StmtKind::kFilterBlock:
      return ExecFilterBlock(s);
    case StmtKind::kWith:
      return ExecWith(s);
    case StmtKind::kBreak:
      control_ = Control::kBreak;
      return Status::Ok();
    case StmtKind::kContinue:
      control_ = Control::kContinue;
      return Status::Ok();
    case StmtKind::kScope:
      return Exec(s.body);
  }
  return Status::Ok();
}

Status Interpreter::ExecOutput(const Stmt& s) {
  for (const ExprPtr& e : s.exprs) {
    PC_ASSIGN_OR_RETURN(Value v, Eval(*e));
    PC_RETURN_IF_ERROR(Locate(AppendStr(v, *out_), s.line));
  }
  if (out_->overflow()) {
    return Locate(
        ResourceExhausted("the rendered text grew past " + std::to_string(out_->cap()) + " bytes"),
        s.line);
  }
  return Status::Ok();
}

Status Interpreter::ExecFor(const Stmt& s) {
  PC_ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr));
  Result<std::vector<Value>> all = Iterate(iterable);
  if (!all.ok()) return Locate(all.status(), s.line);
  std::vector<Value> items;
  if (s.filter) {
    for (Value& item : *all) {
      auto scope = std::make_shared<Scope>(scope_);
      PC_RETURN_IF_ERROR(Locate(Assign(s.target, item, *scope), s.line));
      ScopeSwap swap(this, scope);
      PC_ASSIGN_OR_RETURN(Value keep, Eval(*s.filter));
      if (Truthy(keep)) items.push_back(std::move(item));
    }
  } else {
    items = std::move(*all);
  }
  if (items.empty()) return Exec(s.else_body);
  const size_t n = items.size();
  auto loop = std::make_shared<LoopContext>(std::move(items));
  const Value loop_value = Value::MakeObject(loop);
  for (size_t i = 0; i < n; ++i) {
    PC_RETURN_IF_ERROR(Locate(Charge(1), s.line));
    auto scope = std::make_shared<Scope>(scope_);
    PC_RETURN_IF_ERROR(Locate(Assign(s.target, loop->item(i), *scope), s.line));
    loop->set_index(i);
    scope->Set("loop", loop_value);
    ScopeSwap swap(this, scope);
    PC_RETURN_IF_ERROR(Exec(s.body));
    if (control_ == Control::kBreak) {
      control_ = Control::kNone;
      break;
    }
    control_ = Control::kNone;
  }
  return Status::Ok();
}

Result<Text> Interpreter::Capture(const Body& body) {
  TextBuilder out(limits_.max_string_bytes);
  {
    OutputSwap swap_out(this, &out);
    ScopeSwap swap_scope(this, std::make_shared<Scope>(scope_));
    PC_RETURN_IF_ERROR(Exec(body));
  }
  if (out.overflow()) {
    return ResourceExhausted("a block's output grew past " + std::to_string(out.cap()) + " bytes");
  }
  PC_RETURN_IF_ERROR(Account(out.size()));
  return out.Finish();
}

Status Interpreter::ExecSetBlock(const Stmt& s) {
  PC_ASSIGN_OR_RETURN(Text text, Capture(s.body));
  Value v = Value::String(std::move(text));
  if (s.expr) {
    PC_ASSIGN_OR_RETURN(v, EvalFilter(*s.expr, &v));
  }
  return Locate(Assign(s.target, v, *scope_), s.line);
}

Status Interpreter::ExecCallBlock(const Stmt& s) {
  const Expr& call = *s.expr;
  PC_ASSIGN_OR_RETURN(Value callee, Eval(*call.args[0]));
  PC_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(call, 1));
  PC_RETURN_IF_ERROR(Locate(TrackScope(scope_), s.line));
  args.keyword.emplace_back("caller",
                            Value::MakeCallable(std::make_shared<Macro>(s.macro, scope_)));
  Result<Value> v = Call(callee, std::move(args));
  if (!v.ok()) return Locate(v.status(), s.line);
  return Locate(AppendStr(*v, *out_), s.line);
}

Status Interpreter::ExecFilterBlock(const Stmt& s) {
  PC_ASSIGN_OR_RETURN(Text text, Capture(s.body));
  const Value input = Value::String(std::move(text));
  PC_ASSIGN_OR_RETURN(Value v, EvalFilter(*s.expr, &input));
  return Locate(AppendStr(v, *out_), s.line);
}

Status Interpreter::ExecWith(const Stmt& s) {
  auto scope = std::make_shared<Scope>(scope_);
  for (size_t i = 0; i < s.targets.size(); ++i) {
    PC_ASSIGN_OR_RETURN(Value v, Eval(*s.exprs[i]));
    PC_RETURN_IF_ERROR(Locate(Assign(s.targets[i], v, *scope), s.line));
  }
  ScopeSwap swap(this, scope);
  return Exec(s.body);
}

Status Interpreter::Assign(const Target& target, const Value& value, Scope& scope) {
  switch (target.kind) {
    case Target::Kind::kName:
      scope.Set(target.name, value);
      return Status::Ok();
    case Target::Kind::kNamespaceAttr: {
      const Value ns = Lookup(target.name);
      if (!ns.is_object() || ns.object()->TypeName() != "Namespace") {
        return InvalidArgument("cannot assign attribute on non-namespace object '" + target.name +
                               "'");
      }
      return ns.object()->SetAttr(target.attr, value);
    }
    case Target::Kind::kTuple: {
      const bool generator = value.is_object() && value.object()->TypeName() == "generator";
      if (!value.is_list() && !value.is_string() && !value.is_dict() && !value.is_undefined() &&
          !generator) {
        return InvalidArgument("cannot unpack non-iterable " + TypeName(value) + " object");
      }
      PC_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
      const size_t want = target.items.size();
      if (items.size() < want) {
        return InvalidArgument("not enough values to unpack (expected " + std::to_string(want) +
                               ", got " + std::to_string(items.size()) + ")");
      }
      if (items.size() > want) {
        return InvalidArgument("too many values to unpack (expected " + std::to_string(want) + ")");
      }
      for (size_t i = 0; i < want; ++i) {
        PC_RETURN_IF_ERROR(Assign(target.items[i], items[i], scope));
      }
      return Status::Ok();
    }
  }
  return Status::Ok();
}

// ---- Calls -----------------------------------------------------------------------------------

Result<Value> Interpreter::Call(const Value& callee, CallArgs args) {
  if (callee.is_callable()) return callee.callable()->Call(*this, std::move(args));
  if (callee.is_undefined()) return InvalidArgument(callee.undefined_hint());
  return InvalidArgument("'" + TypeName(callee) + "' object is not callable");
}

Result<Value> Interpreter::CallMacro(const Macro& macro, CallArgs args) {
  const MacroDef& def = macro.def();
  auto scope = std::make_shared<Scope>(macro.scope());
  const size_t n = def.params.size();
  if (args.positional.size() > n && !def.uses_varargs) {
    return InvalidArgument("macro '" + def.name + "' takes not more than " + std::to_string(n) +
                           " argument(s)");
  }
  DictData extra_kwargs;
  Value caller = Value::Undefined("No caller defined");
  std::vector<std::optional<Value>> bound(n);
  for (size_t i = 0; i < n && i < args.positional.size(); ++i) bound[i] = args.positional[i];
  for (auto& [key, value] : args.keyword) {
    auto it = std::find(def.params.begin(), def.params.end(), key);
    if (it != def.params.end()) {
      const size_t i = it - def.params.begin();
      if (bound[i].has_value()) {
        return InvalidArgument("macro '" + def.name + "' got multiple values for argument '" + key +
                               "'");
      }
      bound[i] = std::move(value);
    } else if (key == "caller" && def.uses_caller) {
      caller = std::move(value);
    } else if (def.uses_kwargs) {
      extra_kwargs.Set(Value::Trusted(key), std::move(value));
    } else {
      return InvalidArgument("macro '" + def.name + "' takes no keyword argument '" + key + "'");
    }
  }
  ScopeSwap swap(this, scope);
  const size_t first_default = n - def.defaults.size();
  for (size_t i = 0; i < n; ++i) {
    if (!bound[i].has_value()) {
      if (i >= first_default) {
        PC_ASSIGN_OR_RETURN(bound[i], Eval(*def.defaults[i - first_default]));
      } else {
        bound[i] = Value::Undefined("parameter '" + def.params[i] + "' was not provided");
      }
    }
    scope->Set(def.params[i], std::move(*bound[i]));
  }
  if (def.uses_varargs) {
    std::vector<Value> rest;
    for (size_t i = n; i < args.positional.size(); ++i) rest.push_back(args.positional[i]);
    PC_ASSIGN_OR_RETURN(Value varargs, NewList(std::move(rest), /*tuple=*/true));
    scope->Set("varargs", std::move(varargs));
  }
  if (def.uses_kwargs) {
    PC_ASSIGN_OR_RETURN(Value kwargs, NewDict(std::move(extra_kwargs)));
    scope->Set("kwargs", std::move(kwargs));
  }
  if (def.uses_caller) scope->Set("caller", std::move(caller));
  TextBuilder out(limits_.max_string_bytes);
  {
    OutputSwap swap_out(this, &out);
    PC_RETURN_IF_ERROR(Exec(def.body));
    control_ = Control::kNone;
  }
  if (out.overflow()) {
    return ResourceExhausted("macro '" + def.name + "' wrote more than " +
                             std::to_string(out.cap()) + " bytes");
  }
  PC_RETURN_IF_ERROR(Account(out.size()));
  return Value::String(out.Finish());
}

}  // namespace promptcache::jinja
