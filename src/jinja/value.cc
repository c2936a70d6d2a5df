#include "jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "jinja/code_points.h"

namespace promptcache::jinja {

Value Value::Undefined(std::string hint) {
  return Value(Kind::kUndefined, std::make_shared<std::string>(std::move(hint)));
}

Value Value::None() { return Value(Kind::kNone, nullptr); }

Value Value::Bool(bool b) { return Value(Kind::kBool, b); }

Value Value::Int(int64_t i) { return Value(Kind::kInt, i); }

Value Value::Float(double f) { return Value(Kind::kFloat, f); }

Value Value::String(Text text) { return String(std::make_shared<const Text>(std::move(text))); }

Value Value::String(std::shared_ptr<const Text> text) {
  return Value(Kind::kString, std::const_pointer_cast<Text>(std::move(text)));
}

Result<Value> Value::List(std::vector<Value> items, bool tuple) {
  auto data = std::make_shared<ListData>();
  for (const Value& item : items) data->nesting = std::max(data->nesting, item.nesting() + 1);
  if (data->nesting > kMaxNesting) {
    return ResourceExhausted("lists and dicts nest deeper than " + std::to_string(kMaxNesting));
  }
  data->items = std::move(items);
  return Value(Kind::kList, std::move(data), tuple);
}

Value Value::Range(std::vector<Value> items, std::string repr) {
  auto data = std::make_shared<ListData>();
  data->items = std::move(items);
  data->range_repr = std::move(repr);
  return Value(Kind::kList, std::move(data));
}

bool Value::is_range() const {
  return kind_ == Kind::kList && !static_cast<const ListData*>(ptr_.get())->range_repr.empty();
}

const std::string& Value::range_repr() const {
  PC_CHECK(kind_ == Kind::kList);
  return static_cast<const ListData*>(ptr_.get())->range_repr;
}

Result<Value> Value::Dict(DictData dict) {
  dict.nesting = 1;
  for (const auto& [key, value] : dict.entries) {
    dict.nesting = std::max({dict.nesting, key.nesting() + 1, value.nesting() + 1});
  }
  if (dict.nesting > kMaxNesting) {
    return ResourceExhausted("lists and dicts nest deeper than " + std::to_string(kMaxNesting));
  }
  return Value(Kind::kDict, std::make_shared<DictData>(std::move(dict)));
}

Value Value::MakeObject(std::shared_ptr<Object> object) {
  return Value(Kind::kObject, std::move(object));
}

Value Value::MakeCallable(std::shared_ptr<const Callable> callable) {
  return Value(Kind::kCallable, std::const_pointer_cast<Callable>(std::move(callable)));
}

const Text& Value::text() const {
  PC_CHECK(kind_ == Kind::kString);
  return *static_cast<const Text*>(ptr_.get());
}

std::shared_ptr<const Text> Value::text_ptr() const {
  PC_CHECK(kind_ == Kind::kString);
  return std::shared_ptr<const Text>(ptr_, static_cast<const Text*>(ptr_.get()));
}

const std::vector<Value>& Value::items() const {
  PC_CHECK(kind_ == Kind::kList);
  return static_cast<const ListData*>(ptr_.get())->items;
}

const DictData& Value::dict() const {
  PC_CHECK(kind_ == Kind::kDict);
  return *static_cast<const DictData*>(ptr_.get());
}

Object* Value::object() const {
  PC_CHECK(kind_ == Kind::kObject);
  return static_cast<Object*>(ptr_.get());
}

std::shared_ptr<Object> Value::object_ptr() const {
  PC_CHECK(kind_ == Kind::kObject);
  return std::shared_ptr<Object>(ptr_, static_cast<Object*>(ptr_.get()));
}

const Callable* Value::callable() const {
  PC_CHECK(kind_ == Kind::kCallable);
  return static_cast<const Callable*>(ptr_.get());
}

const std::string& Value::undefined_hint() const {
  static const std::string kDefault = "value is undefined";
  if (kind_ != Kind::kUndefined || ptr_ == nullptr) return kDefault;
  return *static_cast<const std::string*>(ptr_.get());
}

int Value::nesting() const {
  if (kind_ == Kind::kList) return static_cast<const ListData*>(ptr_.get())->nesting;
  if (kind_ == Kind::kDict) return static_cast<const DictData*>(ptr_.get())->nesting;
  return 0;
}

size_t Value::Footprint() const {
  switch (kind_) {
    case Kind::kString:
      return text().size() + text().user_ranges().size() * 16;
    case Kind::kList:
      return items().size() * sizeof(Value);
    case Kind::kDict:
      return dict().entries.size() * 2 * sizeof(Value);
    default:
      return 0;
  }
}

const Value* DictData::Find(std::string_view key) const {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries[it->second].second;
}

const Value* DictData::Find(const Value& key) const {
  if (key.is_string()) return Find(key.text().str());
  for (const auto& [k, v] : entries) {
    if (!k.is_string() && Equal(k, key)) return &v;
  }
  return nullptr;
}

void DictData::Set(Value key, Value value) {
  if (key.is_string()) {
    auto [it, inserted] = index_.emplace(key.text().str(), entries.size());
    if (!inserted) {
      entries[it->second].second = std::move(value);
      return;
    }
  } else {
    for (auto& [k, v] : entries) {
      if (!k.is_string() && Equal(k, key)) {
        v = std::move(value);
        return;
      }
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

Status Object::SetAttr(std::string_view name, Value value) {
  return InvalidArgument("cannot assign attribute '" + std::string(name) + "' of a '" +
                         std::string(TypeName()) + "' object (only namespaces take assignments)");
}

Status Object::AppendRepr(TextBuilder& out, int depth) const {
  out.AppendTrusted("<" + std::string(TypeName()) + " object>");
  return Status::Ok();
}

std::string Callable::Repr() const { return "<function " + std::string(name()) + ">"; }

std::string TypeName(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return v.text().markup() ? "Markup" : "str";
    case Value::Kind::kList:
      return v.is_range() ? "range" : v.is_tuple() ? "tuple" : "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kObject:
      return std::string(v.object()->TypeName());
    case Value::Kind::kCallable:
      return "function";
  }
  return "object";
}

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.boolean();
    case Value::Kind::kInt:
      return v.integer() != 0;
    case Value::Kind::kFloat:
      return v.number() != 0;
    case Value::Kind::kString:
      return !v.text().empty();
    case Value::Kind::kList:
      return !v.items().empty();
    case Value::Kind::kDict:
      return !v.dict().entries.empty();
    case Value::Kind::kObject:
    case Value::Kind::kCallable:
      return true;
  }
  return false;
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.integer() == b.integer();
    return a.number() == b.number();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.text().str() == b.text().str();
    case Value::Kind::kList: {
      if (a.is_tuple() != b.is_tuple() || a.is_range() != b.is_range() ||
          a.items().size() != b.items().size()) {
        return false;
      }
      for (size_t i = 0; i < a.items().size(); ++i) {
        if (!Equal(a.items()[i], b.items()[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict().entries.size() != b.dict().entries.size()) return false;
      for (const auto& [key, value] : a.dict().entries) {
        const Value* other = b.dict().Find(key);
        if (other == nullptr || !Equal(value, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kObject:
      return a.object() == b.object();
    case Value::Kind::kCallable:
      return a.callable() == b.callable();
    default:
      return false;
  }
}

Result<int> Compare(const Value& a, const Value& b, std::string_view op) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) {
      return a.integer() < b.integer() ? -1 : a.integer() > b.integer() ? 1 : 0;
    }
    const double x = a.number(), y = b.number();
    if (std::isnan(x) || std::isnan(y)) return 2;  // every ordering is false; callers check
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.text().str().compare(b.text().str());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple() && !a.is_range() &&
      !b.is_range()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!Equal(x[i], y[i])) return Compare(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  if (a.is_undefined() || b.is_undefined()) {
    return InvalidArgument((a.is_undefined() ? a : b).undefined_hint());
  }
  return InvalidArgument("'" + std::string(op) + "' not supported between instances of '" +
                         TypeName(a) + "' and '" + TypeName(b) + "'");
}

std::string FloatRepr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  const std::string_view s(buf, r.ptr - buf);  // [-]d[.ddd]e(+|-)dd
  const size_t e = s.find('e');
  std::string out;
  size_t i = 0;
  if (s[0] == '-') {
    out += '-';
    i = 1;
  }
  std::string digits;
  for (; i < e; ++i) {
    if (s[i] != '.') digits += s[i];
  }
  int exp10 = 0;
  std::from_chars(s.data() + e + (s[e + 1] == '+' ? 2 : 1), s.data() + s.size(), exp10);
  const int n = static_cast<int>(digits.size());
  if (exp10 >= -4 && exp10 < 16) {
    const int point = exp10 + 1;
    if (point <= 0) {
      out += "0." + std::string(-point, '0') + digits;
    } else if (point >= n) {
      out += digits + std::string(point - n, '0') + ".0";
    } else {
      out += digits.substr(0, point) + "." + digits.substr(point);
    }
    return out;
  }
  out += digits[0];
  if (n > 1) out += "." + digits.substr(1);
  char exp[16];
  std::snprintf(exp, sizeof(exp), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
  return out + exp;
}

namespace {

bool IsPrintable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if ((c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x206F) || c == 0x1680 || c == 0x3000 || c == 0xFEFF) {
    return false;
  }
  if ((c >= 0xD800 && c <= 0xF8FF) || (c >= 0xFFF9 && c <= 0xFFFB)) return false;
  return c < 0xF0000;
}

void AppendStringRepr(const Text& t, TextBuilder& out) {
  const std::string& s = t.str();
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  if (t.markup()) out.AppendTrusted("Markup(");
  out.AppendTrusted(std::string_view(&quote, 1));
  char32_t c;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    len = DecodeUtf8(s, pos, &c);
    std::string piece;
    if (c == '\\' || c == static_cast<char32_t>(quote)) {
      piece = std::string("\\") + static_cast<char>(c);
    } else if (c == '\n') {
      piece = "\\n";
    } else if (c == '\r') {
      piece = "\\r";
    } else if (c == '\t') {
      piece = "\\t";
    } else if (!IsPrintable(c)) {
      char buf[16];
      const unsigned code = static_cast<unsigned>(c);
      if (code < 0x100) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", code);
      } else if (code < 0x10000) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", code);
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", code);
      }
      piece = buf;
    } else {
      out.Append(t, pos, pos + len);
      continue;
    }
    out.AppendLike(piece, t, pos);
  }
  out.AppendTrusted(std::string_view(&quote, 1));
  if (t.markup()) out.AppendTrusted(")");
}

}  // namespace

Status AppendRepr(const Value& v, TextBuilder& out, int depth) {
  if (depth > kMaxNesting) return InvalidArgument("value nests too deep to print");
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      out.AppendTrusted("Undefined");
      return Status::Ok();
    case Value::Kind::kString:
      AppendStringRepr(v.text(), out);
      return Status::Ok();
    case Value::Kind::kList: {
      if (v.is_range()) {
        out.AppendTrusted(v.range_repr());
        return Status::Ok();
      }
      out.AppendTrusted(v.is_tuple() ? "(" : "[");
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i > 0) out.AppendTrusted(", ");
        PC_RETURN_IF_ERROR(AppendRepr(v.items()[i], out, depth + 1));
      }
      if (v.is_tuple() && v.items().size() == 1) out.AppendTrusted(",");
      out.AppendTrusted(v.is_tuple() ? ")" : "]");
      return Status::Ok();
    }
    case Value::Kind::kDict: {
      out.AppendTrusted("{");
      bool first = true;
      for (const auto& [key, value] : v.dict().entries) {
        if (!first) out.AppendTrusted(", ");
        first = false;
        PC_RETURN_IF_ERROR(AppendRepr(key, out, depth + 1));
        out.AppendTrusted(": ");
        PC_RETURN_IF_ERROR(AppendRepr(value, out, depth + 1));
      }
      out.AppendTrusted("}");
      return Status::Ok();
    }
    case Value::Kind::kObject:
      return v.object()->AppendRepr(out, depth + 1);
    default:
      return AppendStr(v, out);
  }
}

Status AppendStr(const Value& v, TextBuilder& out) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return Status::Ok();
    case Value::Kind::kNone:
      out.AppendTrusted("None");
      return Status::Ok();
    case Value::Kind::kBool:
      out.AppendTrusted(v.boolean() ? "True" : "False");
      return Status::Ok();
    case Value::Kind::kInt:
      out.AppendTrusted(std::to_string(v.integer()));
      return Status::Ok();
    case Value::Kind::kFloat:
      out.AppendTrusted(FloatRepr(v.number()));
      return Status::Ok();
    case Value::Kind::kString:
      out.Append(v.text());
      return Status::Ok();
    case Value::Kind::kCallable:
      out.AppendTrusted(v.callable()->Repr());
      return Status::Ok();
    default:
      return AppendRepr(v, out, 0);
  }
}

Result<Text> ToText(const Value& v, size_t cap) {
  if (v.is_string()) return v.text();
  TextBuilder out(cap);
  PC_RETURN_IF_ERROR(AppendStr(v, out));
  if (out.overflow())
    return ResourceExhausted("a string grew past " + std::to_string(cap) + " bytes");
  return out.Finish();
}

}  // namespace promptcache::jinja
