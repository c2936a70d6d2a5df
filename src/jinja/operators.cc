// Python's semantics for attribute and item access, iteration, `in` and the arithmetic
// operators, as Jinja2 applies them to template values.
#include <cmath>
#include <limits>

#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/str_ops.h"
#include "jinja/code_points.h"

namespace promptcache::jinja {
namespace {

Value NoAttribute(const Value& obj, std::string_view name) {
  return Value::Undefined("'" + TypeName(obj) + " object' has no attribute '" + std::string(name) +
                          "'");
}

Status Unsupported(std::string_view op, const Value& a, const Value& b) {
  return InvalidArgument("unsupported operand type(s) for " + std::string(op) + ": '" +
                         TypeName(a) + "' and '" + TypeName(b) + "'");
}

// Python's float // and %.
double FloatMod(double a, double b) {
  double mod = std::fmod(a, b);
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) mod += b;
  } else {
    mod = std::copysign(0.0, b);
  }
  return mod;
}

double FloatFloorDiv(double a, double b) {
  const double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return std::copysign(0.0, a / b);
  double floordiv = std::floor(div);
  if (div - floordiv > 0.5) floordiv += 1.0;
  return floordiv;
}

Result<Value> IntPow(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 0) return InvalidArgument("0.0 cannot be raised to a negative power");
    return Value::Float(std::pow(static_cast<double>(base), static_cast<double>(exp)));
  }
  int64_t result = 1;
  while (exp > 0) {
    if ((exp & 1) && __builtin_mul_overflow(result, base, &result)) {
      return InvalidArgument("integer overflow");
    }
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) {
      return InvalidArgument("integer overflow");
    }
  }
  return Value::Int(result);
}

Result<Value> Arithmetic(std::string_view op, const Value& a, const Value& b) {
  const bool ints = a.is_integral() && b.is_integral();
  const int64_t x = a.integer(), y = b.integer();
  const double fx = a.number(), fy = b.number();
  int64_t r = 0;
  if (op == "+" || op == "-" || op == "*") {
    if (!ints) return Value::Float(op == "+" ? fx + fy : op == "-" ? fx - fy : fx * fy);
    const bool overflow = op == "+"   ? __builtin_add_overflow(x, y, &r)
                          : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                      : __builtin_mul_overflow(x, y, &r);
    if (overflow) return InvalidArgument("integer overflow");
    return Value::Int(r);
  }
  if (op == "/") {
    if (fy == 0) return InvalidArgument("division by zero");
    return Value::Float(fx / fy);
  }
  if (op == "//" || op == "%") {
    if (ints) {
      if (y == 0) return InvalidArgument("integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) {
        return op == "%" ? Value::Int(0) : Result<Value>(InvalidArgument("integer overflow"));
      }
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        q -= 1;
        m += y;
      }
      return Value::Int(op == "//" ? q : m);
    }
    if (fy == 0) return InvalidArgument("float division by zero");
    return Value::Float(op == "//" ? FloatFloorDiv(fx, fy) : FloatMod(fx, fy));
  }
  // **
  if (ints) return IntPow(x, y);
  if (fx == 0 && fy < 0) return InvalidArgument("0.0 cannot be raised to a negative power");
  if (fx < 0 && fy != std::floor(fy)) {
    return InvalidArgument("a negative number raised to a fractional power is not real");
  }
  return Value::Float(std::pow(fx, fy));
}

}  // namespace

Result<Value> Interpreter::GetAttr(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      return InvalidArgument(obj.undefined_hint());
    case Value::Kind::kObject:
      return obj.object()->GetAttr(name);
    case Value::Kind::kDict: {
      if (std::optional<Value> m = FindMethod(obj, name)) return *m;
      if (const Value* v = obj.dict().Find(name)) return *v;
      return NoAttribute(obj, name);
    }
    case Value::Kind::kString:
    case Value::Kind::kList:
      if (std::optional<Value> m = FindMethod(obj, name)) return *m;
      return NoAttribute(obj, name);
    default:
      return NoAttribute(obj, name);
  }
}

Result<Value> Interpreter::GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return InvalidArgument(obj.undefined_hint());
  if (obj.is_dict()) {
    if (key.is_list() && !key.is_tuple()) return InvalidArgument("unhashable type: 'list'");
    if (const Value* v = obj.dict().Find(key)) return *v;
  } else if ((obj.is_list() || obj.is_string()) && key.is_integral()) {
    int64_t i = key.integer();
    if (obj.is_list()) {
      const int64_t n = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.items()[i];
    } else {
      const std::vector<size_t> offsets = CodePointOffsets(obj.text().str());
      const int64_t n = static_cast<int64_t>(offsets.size()) - 1;
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value::String(obj.text().Slice(offsets[i], offsets[i + 1]));
    }
    return Value::Undefined(TypeName(obj) + " index out of range");
  } else if (obj.is_object() && key.is_string()) {
    return obj.object()->GetAttr(key.text().str());
  }
  if (key.is_string()) {
    if (std::optional<Value> m = FindMethod(obj, key.text().str())) return *m;
    return NoAttribute(obj, key.text().str());
  }
  TextBuilder shown(200);
  PC_RETURN_IF_ERROR(AppendRepr(key, shown));
  return Value::Undefined("'" + TypeName(obj) + " object' has no attribute " +
                          shown.Finish().str());
}

Result<std::vector<Value>> Interpreter::Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>();
    case Value::Kind::kList:
      return v.items();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.dict().entries.size());
      for (const auto& [key, value] : v.dict().entries) keys.push_back(key);
      return keys;
    }
    case Value::Kind::kString: {
      const Text& t = v.text();
      const std::vector<size_t> offsets = CodePointOffsets(t.str());
      std::vector<Value> chars;
      chars.reserve(offsets.size() - 1);
      for (size_t i = 0; i + 1 < offsets.size(); ++i) {
        chars.push_back(Value::String(t.Slice(offsets[i], offsets[i + 1])));
      }
      PC_RETURN_IF_ERROR(Account(chars.size() * (sizeof(Value) + sizeof(Text) + 8)));
      return chars;
    }
    case Value::Kind::kObject:
      if (auto* g = dynamic_cast<Generator*>(v.object())) return g->TakeAll();
      [[fallthrough]];
    default:
      return InvalidArgument("'" + TypeName(v) + "' object is not iterable");
  }
}

Result<bool> Interpreter::Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return InvalidArgument("'in <string>' requires string as left operand, not " +
                               TypeName(item));
      }
      PC_RETURN_IF_ERROR(Charge(static_cast<int64_t>(container.text().size() / 4096)));
      return FindBytes(container.text().str(), item.text().str(), 0) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.items()) {
        if (Equal(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      if ((item.is_list() && !item.is_tuple()) || item.is_dict()) {
        return InvalidArgument("unhashable type: '" + TypeName(item) + "'");
      }
      return container.dict().Find(item) != nullptr;
    case Value::Kind::kObject:
      if (auto* g = dynamic_cast<Generator*>(container.object())) {
        while (std::optional<Value> v = g->TakeOne()) {
          if (Equal(*v, item)) return true;
        }
        return false;
      }
      [[fallthrough]];
    default:
      return InvalidArgument("argument of type '" + TypeName(container) + "' is not iterable");
  }
}

Result<Value> Interpreter::Binary(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) return InvalidArgument(a.undefined_hint());
  if (b.is_undefined()) return InvalidArgument(b.undefined_hint());
  if (a.is_number() && b.is_number()) return Arithmetic(op, a, b);
  if (op == "+" && a.is_string() && b.is_string()) {
    TextBuilder out(limits_.max_string_bytes);
    const bool markup = a.text().markup() || b.text().markup();
    // markupsafe: adding to a Markup string HTML-escapes the plain operand.
    const Text left = markup && !a.text().markup() ? HtmlEscape(a.text()) : Text();
    const Text right = markup && !b.text().markup() ? HtmlEscape(b.text()) : Text();
    out.Append(markup && !a.text().markup() ? left : a.text());
    out.Append(markup && !b.text().markup() ? right : b.text());
    if (out.overflow()) return ResourceExhausted("a string grew past its limit");
    PC_RETURN_IF_ERROR(Account(out.size()));
    Text t = out.Finish();
    t.set_markup(markup);
    return Value::String(std::move(t));
  }
  if (op == "+" && a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple() && !a.is_range() &&
      !b.is_range()) {
    std::vector<Value> items = a.items();
    items.insert(items.end(), b.items().begin(), b.items().end());
    return NewList(std::move(items), a.is_tuple());
  }
  if (op == "*" && (a.is_integral() != b.is_integral()) &&
      (a.is_string() || b.is_string() || a.is_list() || b.is_list()) && !a.is_range() &&
      !b.is_range()) {
    const Value& seq = a.is_integral() ? b : a;
    const int64_t n = std::max<int64_t>(0, (a.is_integral() ? a : b).integer());
    if (seq.is_string()) {
      const size_t size = seq.text().size();
      if (size > 0 && static_cast<uint64_t>(n) > limits_.max_string_bytes / size) {
        return ResourceExhausted("a string grew past its limit");
      }
      TextBuilder out;
      for (int64_t i = 0; i < n; ++i) out.Append(seq.text());
      PC_RETURN_IF_ERROR(Account(out.size()));
      return Value::String(out.Finish());
    }
    const size_t size = seq.items().size();
    if (size > 0 && static_cast<uint64_t>(n) > limits_.max_list_items / size) {
      return ResourceExhausted("a list grew past its limit");
    }
    std::vector<Value> items;
    for (int64_t i = 0; i < n; ++i)
      items.insert(items.end(), seq.items().begin(), seq.items().end());
    return NewList(std::move(items), seq.is_tuple());
  }
  if (op == "%" && a.is_string()) {
    PC_ASSIGN_OR_RETURN(Text t, PercentFormat(*this, a.text(), b));
    PC_RETURN_IF_ERROR(Account(t.size()));
    return Value::String(std::move(t));
  }
  if (op == "+" && a.is_string()) {
    return InvalidArgument("can only concatenate str (not \"" + TypeName(b) + "\") to str");
  }
  if (op == "+" && a.is_list()) {
    return InvalidArgument("can only concatenate " + TypeName(a) + " (not \"" + TypeName(b) +
                           "\") to " + TypeName(a));
  }
  return Unsupported(op, a, b);
}

}  // namespace promptcache::jinja
