// Expressions: Interpreter::Eval and its helpers.
#include <algorithm>

#include "jinja/builtins.h"
#include "jinja/code_points.h"
#include "jinja/interpreter.h"

namespace promptcache::jinja {

Result<Value> Interpreter::Eval(const Expr& e) {
  DepthGuard guard(this);
  PC_RETURN_IF_ERROR(Enter(guard, e.line));
  Result<Value> v = EvalInner(e);
  if (!v.ok()) return Locate(v.status(), e.line);
  return v;
}

Result<Value> Interpreter::EvalInner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kConst:
      return e.value;
    case ExprKind::kName:
      return Lookup(e.name);
    case ExprKind::kGetAttr: {
      PC_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
      return GetAttr(obj, e.name);
    }
    case ExprKind::kGetItem:
      return EvalGetItem(e);
    case ExprKind::kSlice:
      return InvalidArgument("a slice is only valid inside []");
    case ExprKind::kCall:
      return EvalCall(e);
    case ExprKind::kFilter:
      return EvalFilter(e, nullptr);
    case ExprKind::kTest: {
      PC_ASSIGN_OR_RETURN(Value input, Eval(*e.args[0]));
      PC_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
      PC_ASSIGN_OR_RETURN(bool result, ApplyTest(*this, e.name, input, std::move(args)));
      return Value::Bool(result);
    }
    case ExprKind::kNeg:
    case ExprKind::kPos:
      return EvalUnary(e);
    case ExprKind::kNot: {
      PC_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
      return Value::Bool(!Truthy(v));
    }
    case ExprKind::kBinary: {
      PC_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
      PC_ASSIGN_OR_RETURN(Value b, Eval(*e.args[1]));
      return Binary(e.name, a, b);
    }
    case ExprKind::kAnd:
    case ExprKind::kOr: {
      PC_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0]));
      if (Truthy(a) == (e.kind == ExprKind::kOr)) return a;
      return Eval(*e.args[1]);
    }
    case ExprKind::kCompare:
      return EvalCompare(e);
    case ExprKind::kCond: {
      PC_ASSIGN_OR_RETURN(Value cond, Eval(*e.args[0]));
      if (Truthy(cond)) return Eval(*e.args[1]);
      if (e.args[2]) return Eval(*e.args[2]);
      return Value::Undefined(
          "the inline if-expression evaluated to false and no else section was defined");
    }
    case ExprKind::kConcat: {
      TextBuilder out(limits_.max_string_bytes);
      for (const ExprPtr& a : e.args) {
        PC_ASSIGN_OR_RETURN(Value v, Eval(*a));
        PC_RETURN_IF_ERROR(AppendStr(v, out));
      }
      if (out.overflow()) return ResourceExhausted("a string grew past its limit");
      PC_RETURN_IF_ERROR(Account(out.size()));
      return Value::String(out.Finish());
    }
    case ExprKind::kList:
    case ExprKind::kTuple:
    case ExprKind::kDict:
      return EvalLiteral(e);
  }
  return Internal("unknown expression");
}

Result<Value> Interpreter::EvalLiteral(const Expr& e) {
  if (e.kind == ExprKind::kDict) {
    DictData dict;
    for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
      PC_ASSIGN_OR_RETURN(Value key, Eval(*e.args[i]));
      PC_ASSIGN_OR_RETURN(Value value, Eval(*e.args[i + 1]));
      if (key.is_list() && !key.is_tuple()) return InvalidArgument("unhashable type: 'list'");
      if (key.is_dict()) return InvalidArgument("unhashable type: 'dict'");
      dict.Set(std::move(key), std::move(value));
    }
    return NewDict(std::move(dict));
  }
  std::vector<Value> items;
  items.reserve(e.args.size());
  for (const ExprPtr& a : e.args) {
    PC_ASSIGN_OR_RETURN(Value v, Eval(*a));
    items.push_back(std::move(v));
  }
  return NewList(std::move(items), e.kind == ExprKind::kTuple);
}

Result<Value> Interpreter::EvalUnary(const Expr& e) {
  PC_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0]));
  if (v.is_undefined()) return InvalidArgument(v.undefined_hint());
  if (!v.is_number()) {
    return InvalidArgument(std::string("bad operand type for unary ") +
                           (e.kind == ExprKind::kNeg ? "-" : "+") + ": '" + TypeName(v) + "'");
  }
  if (e.kind == ExprKind::kPos) return v.is_bool() ? Value::Int(v.integer()) : v;
  if (v.is_float()) return Value::Float(-v.number());
  if (v.integer() == INT64_MIN) return InvalidArgument("integer overflow");
  return Value::Int(-v.integer());
}

Result<Value> Interpreter::EvalCompare(const Expr& e) {
  PC_ASSIGN_OR_RETURN(Value left, Eval(*e.args[0]));
  for (size_t i = 0; i < e.ops.size(); ++i) {
    PC_ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1]));
    const std::string& op = e.ops[i];
    bool result;
    if (op == "==" || op == "!=") {
      result = Equal(left, right) == (op == "==");
    } else if (op == "in" || op == "notin") {
      PC_ASSIGN_OR_RETURN(bool in, Contains(right, left));
      result = in == (op == "in");
    } else {
      PC_ASSIGN_OR_RETURN(int c, Compare(left, right, op));
      if (c == 2) {
        result = false;  // NaN
      } else if (op == "<") {
        result = c < 0;
      } else if (op == "<=") {
        result = c <= 0;
      } else if (op == ">") {
        result = c > 0;
      } else {
        result = c >= 0;
      }
    }
    if (!result) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

Result<CallArgs> Interpreter::EvalArgs(const Expr& e, size_t first) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i) {
    PC_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i]));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [key, expr] : e.kwargs) {
    PC_ASSIGN_OR_RETURN(Value v, Eval(*expr));
    args.keyword.emplace_back(key, std::move(v));
  }
  if (e.dyn_args) {
    PC_ASSIGN_OR_RETURN(Value v, Eval(*e.dyn_args));
    PC_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
    for (Value& item : items) args.positional.push_back(std::move(item));
  }
  if (e.dyn_kwargs) {
    PC_ASSIGN_OR_RETURN(Value v, Eval(*e.dyn_kwargs));
    if (!v.is_dict()) {
      return InvalidArgument("argument after ** must be a mapping, not " + TypeName(v));
    }
    for (const auto& [key, value] : v.dict().entries) {
      if (!key.is_string()) return InvalidArgument("keywords must be strings");
      args.keyword.emplace_back(key.text().str(), value);
    }
  }
  return args;
}

Result<Value> Interpreter::EvalCall(const Expr& e) {
  PC_ASSIGN_OR_RETURN(Value callee, Eval(*e.args[0]));
  PC_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
  PC_ASSIGN_OR_RETURN(Value result, Call(callee, std::move(args)));
  PC_RETURN_IF_ERROR(Account(result.Footprint()));
  return result;
}

// A filter chain: e.args[0] is the filtered expression, or null where the input is the body of
// a {% filter %} or {% set %} block (`input`).
Result<Value> Interpreter::EvalFilter(const Expr& e, const Value* input) {
  Value in;
  if (!e.args[0]) {
    PC_CHECK(input != nullptr);
    in = *input;
  } else if (input != nullptr) {  // a block's chain: filters down to the block's body
    PC_CHECK(e.args[0]->kind == ExprKind::kFilter);
    PC_ASSIGN_OR_RETURN(in, EvalFilter(*e.args[0], input));
  } else {
    PC_ASSIGN_OR_RETURN(in, Eval(*e.args[0]));
  }
  PC_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1));
  Result<Value> result = ApplyFilter(*this, e.name, in, std::move(args));
  if (!result.ok()) return Locate(result.status(), e.line);
  PC_RETURN_IF_ERROR(Account(result->Footprint()));
  return result;
}

Result<Value> Interpreter::EvalGetItem(const Expr& e) {
  PC_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0]));
  if (e.args[1]->kind == ExprKind::kSlice) return EvalSlice(obj, *e.args[1]);
  PC_ASSIGN_OR_RETURN(Value key, Eval(*e.args[1]));
  return GetItem(obj, key);
}

namespace {

// Python's slice.indices(): the visited positions of a sequence of `n` items.
struct SliceRange {
  int64_t start, step, count;
};

Result<SliceRange> ResolveSlice(const std::optional<int64_t> bounds[3], int64_t n) {
  const int64_t step = bounds[2].value_or(1);
  if (step == 0) return InvalidArgument("slice step cannot be zero");
  const int64_t lower = step < 0 ? -1 : 0;
  const int64_t upper = step < 0 ? n - 1 : n;
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v.has_value()) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < lower) x = lower;
    } else if (x > upper) {
      x = upper;
    }
    return x;
  };
  const int64_t start = clamp(bounds[0], step < 0 ? upper : lower);
  const int64_t stop = clamp(bounds[1], step < 0 ? lower : upper);
  int64_t count = 0;
  if (step > 0 && start < stop) count = (stop - start - 1) / step + 1;
  if (step < 0 && stop < start) count = (start - stop - 1) / (-step) + 1;
  return SliceRange{start, step, count};
}

}  // namespace

Result<Value> Interpreter::EvalSlice(const Value& obj, const Expr& slice) {
  std::optional<int64_t> bounds[3];
  bool valid = true;
  for (int i = 0; i < 3; ++i) {
    if (!slice.args[i]) continue;
    PC_ASSIGN_OR_RETURN(Value v, Eval(*slice.args[i]));
    if (v.is_integral()) {
      bounds[i] = v.integer();
    } else if (!v.is_none()) {
      valid = false;  // Python raises TypeError, which Jinja2 turns into undefined
    }
  }
  if (obj.is_undefined()) return InvalidArgument(obj.undefined_hint());
  if (!valid || !(obj.is_list() || obj.is_string())) {
    return Value::Undefined("'" + TypeName(obj) + " object' cannot be sliced");
  }
  if (obj.is_list()) {
    const auto& items = obj.items();
    PC_ASSIGN_OR_RETURN(SliceRange r, ResolveSlice(bounds, static_cast<int64_t>(items.size())));
    std::vector<Value> out;
    out.reserve(r.count);
    for (int64_t i = 0, at = r.start; i < r.count; ++i, at += r.step) out.push_back(items[at]);
    return NewList(std::move(out), obj.is_tuple());
  }
  const Text& text = obj.text();
  const std::vector<size_t> offsets = CodePointOffsets(text.str());
  const int64_t n = static_cast<int64_t>(offsets.size()) - 1;
  PC_ASSIGN_OR_RETURN(SliceRange r, ResolveSlice(bounds, n));
  if (r.step == 1) {
    if (r.count == 0) return Value::Trusted("");
    Text sliced = text.Slice(offsets[r.start], offsets[r.start + r.count]);
    PC_RETURN_IF_ERROR(Account(sliced.size()));
    return Value::String(std::move(sliced));
  }
  TextBuilder out;
  for (int64_t i = 0, at = r.start; i < r.count; ++i, at += r.step) {
    out.Append(text, offsets[at], offsets[at + 1]);
  }
  PC_RETURN_IF_ERROR(Account(out.size()));
  return Value::String(out.Finish());
}

}  // namespace promptcache::jinja
