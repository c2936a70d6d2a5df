// The Python methods templates call on strings, dicts and lists ("x".strip(), d.items(),
// d.get(k, default), l.index(v)). Methods that would mutate a dict or list are refused, as
// Jinja2's ImmutableSandboxedEnvironment refuses them.
#include <algorithm>
#include <optional>

#include "jinja/builtins.h"
#include "jinja/code_points.h"
#include "jinja/interpreter.h"
#include "jinja/str_ops.h"

namespace promptcache::jinja {
namespace {

using Args = std::vector<std::optional<Value>>;

Result<std::optional<std::string>> OptionalString(const std::optional<Value>& v,
                                                  std::string_view what) {
  if (!v.has_value() || v->is_none()) return std::optional<std::string>();
  if (!v->is_string()) return InvalidArgument(std::string(what) + " must be str or None");
  return std::optional<std::string>(v->text().str());
}

Result<int64_t> OptionalInt(const std::optional<Value>& v, int64_t dflt) {
  if (!v.has_value() || v->is_none()) return dflt;
  if (!v->is_integral()) {
    return InvalidArgument("'" + TypeName(*v) + "' object cannot be interpreted as an integer");
  }
  return v->integer();
}

Result<Value> StringList(Interpreter& in, std::vector<Text> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (Text& t : parts) items.push_back(Value::String(std::move(t)));
  return in.NewList(std::move(items));
}

// startswith/endswith: a prefix or a tuple of prefixes.
Result<Value> Affix(const Text& self, const Value& arg, bool start) {
  std::vector<const Value*> options;
  if (arg.is_list() && arg.is_tuple()) {
    for (const Value& v : arg.items()) options.push_back(&v);
  } else {
    options.push_back(&arg);
  }
  const std::string& s = self.str();
  for (const Value* o : options) {
    if (!o->is_string()) {
      return InvalidArgument(std::string(start ? "startswith" : "endswith") +
                             " first arg must be str or a tuple of str, not " + TypeName(*o));
    }
    const std::string& a = o->text().str();
    if (a.size() <= s.size() && (start ? s.compare(0, a.size(), a) == 0
                                       : s.compare(s.size() - a.size(), a.size(), a) == 0)) {
      return Value::Bool(true);
    }
  }
  return Value::Bool(false);
}

Result<Value> StringPredicate(const Text& self, std::string_view name) {
  const std::string& s = self.str();
  if (s.empty()) return Value::Bool(false);
  bool all = true, any_cased = false;
  char32_t c;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    len = DecodeUtf8(s, pos, &c);
    bool ok = true;
    if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") ok = IsDigit(c);
    if (name == "isalpha") ok = IsAlpha(c);
    if (name == "isalnum") ok = IsAlpha(c) || IsDigit(c);
    if (name == "isspace") ok = IsSpace(c);
    if (name == "islower") ok = !IsUpper(c), any_cased |= IsLower(c);
    if (name == "isupper") ok = !IsLower(c), any_cased |= IsUpper(c);
    all = all && ok;
  }
  if (name == "islower" || name == "isupper") return Value::Bool(all && any_cased);
  return Value::Bool(all);
}

// str.find/rfind/index/rindex/count on code point positions.
Result<Value> Search(const Text& self, std::string_view name, Args a) {
  if (!a[0]->is_string()) return InvalidArgument("must be str, not " + TypeName(*a[0]));
  const std::string& s = self.str();
  const std::string& sub = a[0]->text().str();
  const std::vector<size_t> offsets = CodePointOffsets(s);
  const int64_t n = static_cast<int64_t>(offsets.size()) - 1;
  PC_ASSIGN_OR_RETURN(int64_t start, OptionalInt(a[1], 0));
  PC_ASSIGN_OR_RETURN(int64_t end, OptionalInt(a[2], n));
  if (start < 0) start = std::max<int64_t>(0, start + n);
  if (end < 0) end = std::max<int64_t>(0, end + n);
  start = std::min(start, n), end = std::min(end, n);
  const std::string_view window =
      start <= end ? std::string_view(s).substr(offsets[start], offsets[end] - offsets[start])
                   : std::string_view();
  if (name == "count") {
    if (start > end) return Value::Int(0);
    if (sub.empty()) return Value::Int(CodePointCount(window) + 1);
    int64_t count = 0;
    for (size_t p = 0; (p = FindBytes(window, sub, p)) != std::string::npos; p += sub.size()) {
      ++count;
    }
    return Value::Int(count);
  }
  size_t found = std::string::npos;
  if (start <= end) found = name[0] == 'r' ? window.rfind(sub) : FindBytes(window, sub, 0);
  if (found == std::string::npos) {
    if (name == "index" || name == "rindex") return InvalidArgument("substring not found");
    return Value::Int(-1);
  }
  return Value::Int(start + CodePointIndex(window, found));
}

// The case-changing methods (no arguments), by name.
std::optional<CaseChange> CaseMethod(std::string_view name) {
  static constexpr std::pair<std::string_view, CaseChange> kCases[] = {
      {"upper", CaseChange::kUpper},    {"lower", CaseChange::kLower},
      {"casefold", CaseChange::kLower}, {"swapcase", CaseChange::kSwap},
      {"title", CaseChange::kTitle},    {"capitalize", CaseChange::kCapitalize}};
  for (const auto& [n, change] : kCases) {
    if (name == n) return change;
  }
  return std::nullopt;
}

// str.join(iterable): every item must be a str.
Result<Value> Join(Interpreter& in, const Text& self, const Value& iterable, size_t cap) {
  PC_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(iterable));
  TextBuilder out(cap);
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      return InvalidArgument("sequence item " + std::to_string(i) + ": expected str instance, " +
                             TypeName(items[i]) + " found");
    }
    if (i > 0) out.Append(self);
    out.Append(items[i].text());
  }
  if (out.overflow()) return ResourceExhausted("join() grew a string past its limit");
  return Value::String(out.Finish());
}

// center, ljust, rjust (width, fillchar).
Result<Value> Justify(const Text& self, std::string_view name, Args a, size_t cap) {
  PC_ASSIGN_OR_RETURN(int64_t width, OptionalInt(a[0], 0));
  char32_t fill = ' ';
  if (a[1].has_value()) {
    if (!a[1]->is_string() || CodePointCount(a[1]->text().str()) != 1) {
      return InvalidArgument("the fill character must be exactly one character long");
    }
    DecodeUtf8(a[1]->text().str(), 0, &fill);
  }
  const char align = name == "center" ? '^' : name == "ljust" ? '<' : '>';
  PC_ASSIGN_OR_RETURN(Text t, Pad(self, width, fill, align, cap));
  return Value::String(std::move(t));
}

// zfill(width): zeros after the sign.
Result<Value> Zfill(const Text& self, const std::optional<Value>& width_arg, size_t cap) {
  PC_ASSIGN_OR_RETURN(int64_t width, OptionalInt(width_arg, 0));
  const std::string& s = self.str();
  const size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
  PC_ASSIGN_OR_RETURN(Text digits, Pad(self.Slice(sign, s.size()),
                                       width - static_cast<int64_t>(sign), '0', '>', cap));
  TextBuilder out;
  out.Append(self, 0, sign);
  out.Append(digits);
  return Value::String(out.Finish());
}

// removeprefix, removesuffix: the string itself when it does not have the affix.
Result<Value> RemoveAffix(const Value& self_value, std::string_view name, const Value& affix) {
  if (!affix.is_string()) return InvalidArgument(std::string(name) + "() argument must be str");
  const Text& self = self_value.text();
  const std::string& s = self.str();
  const std::string& x = affix.text().str();
  if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) {
    return Value::String(self.Slice(x.size(), s.size()));
  }
  if (name == "removesuffix" && !x.empty() && x.size() <= s.size() &&
      s.compare(s.size() - x.size(), x.size(), x) == 0) {
    return Value::String(self.Slice(0, s.size() - x.size()));
  }
  return self_value;
}

// partition (at the first separator) or rpartition (at the last): a 3-tuple.
Result<Value> Partition(Interpreter& in, const Value& self_value, bool first,
                        const Value& sep_arg) {
  if (!sep_arg.is_string() || sep_arg.text().empty()) {
    return InvalidArgument("partition() separator must be a non-empty str");
  }
  const Text& self = self_value.text();
  const std::string& s = self.str();
  const std::string& sep = sep_arg.text().str();
  const size_t at = first ? FindBytes(s, sep, 0) : s.rfind(sep);
  std::vector<Value> parts;
  if (at == std::string::npos) {
    parts = first ? std::vector<Value>{self_value, Value::Trusted(""), Value::Trusted("")}
                  : std::vector<Value>{Value::Trusted(""), Value::Trusted(""), self_value};
  } else {
    parts = {Value::String(self.Slice(0, at)), Value::String(self.Slice(at, at + sep.size())),
             Value::String(self.Slice(at + sep.size(), s.size()))};
  }
  return in.NewList(std::move(parts), /*tuple=*/true);
}

Result<Value> CallStringMethod(Interpreter& in, const Value& self_value, std::string_view name,
                               CallArgs args) {
  const Text& self = self_value.text();
  const size_t cap = in.limits().max_string_bytes;
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    PC_ASSIGN_OR_RETURN(Args a, BindArgs(name, std::move(args), {"chars"}));
    PC_ASSIGN_OR_RETURN(auto chars, OptionalString(a[0], "strip arg"));
    return Value::String(Strip(self, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    PC_ASSIGN_OR_RETURN(Args a, BindArgs(name, std::move(args), {"sep", "maxsplit"}));
    PC_ASSIGN_OR_RETURN(auto sep, OptionalString(a[0], "sep"));
    PC_ASSIGN_OR_RETURN(int64_t maxsplit, OptionalInt(a[1], -1));
    PC_ASSIGN_OR_RETURN(std::vector<Text> parts, Split(self, sep, maxsplit, name == "rsplit"));
    return StringList(in, std::move(parts));
  }
  if (name == "splitlines") {
    PC_ASSIGN_OR_RETURN(Args a, BindArgs(name, std::move(args), {"keepends"}));
    return StringList(in, SplitLines(self, a[0].has_value() && Truthy(*a[0])));
  }
  if (name == "startswith" || name == "endswith") {
    PC_ASSIGN_OR_RETURN(Args a, BindArgs(name, std::move(args), {"prefix"}, 1));
    return Affix(self, *a[0], name == "startswith");
  }
  if (name == "replace") {
    PC_ASSIGN_OR_RETURN(Args a, BindArgs(name, std::move(args), {"old", "new", "count"}, 2));
    if (!a[0]->is_string() || !a[1]->is_string()) {
      return InvalidArgument("replace() arguments must be str");
    }
    PC_ASSIGN_OR_RETURN(int64_t count, OptionalInt(a[2], -1));
    std::optional<Text> t = Replace(self, a[0]->text().str(), a[1]->text(), count, cap);
    if (!t) return ResourceExhausted("replace() grew a string past its limit");
    return Value::String(std::move(*t));
  }
  if (const std::optional<CaseChange> change = CaseMethod(name)) {
    PC_RETURN_IF_ERROR(BindArgs(name, std::move(args), {}).status());
    return Value::String(ChangeCase(self, *change));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    PC_ASSIGN_OR_RETURN(Args a, BindArgs(name, std::move(args), {"sub", "start", "end"}, 1));
    return Search(self, name, std::move(a));
  }
  if (name.substr(0, 2) == "is") {
    PC_RETURN_IF_ERROR(BindArgs(name, std::move(args), {}).status());
    return StringPredicate(self, name);
  }
  if (name == "join") {
    PC_ASSIGN_OR_RETURN(Args a, BindArgs(name, std::move(args), {"iterable"}, 1));
    return Join(in, self, *a[0], cap);
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    PC_ASSIGN_OR_RETURN(Args a, BindArgs(name, std::move(args), {"width", "fillchar"}, 1));
    return Justify(self, name, std::move(a), cap);
  }
  if (name == "zfill") {
    PC_ASSIGN_OR_RETURN(Args a, BindArgs(name, std::move(args), {"width"}, 1));
    return Zfill(self, *a[0], cap);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    PC_ASSIGN_OR_RETURN(Args a, BindArgs(name, std::move(args), {"affix"}, 1));
    return RemoveAffix(self_value, name, *a[0]);
  }
  if (name == "partition" || name == "rpartition") {
    PC_ASSIGN_OR_RETURN(Args a, BindArgs(name, std::move(args), {"sep"}, 1));
    return Partition(in, self_value, name == "partition", *a[0]);
  }
  if (name == "format") {
    PC_ASSIGN_OR_RETURN(Text t, StrFormat(in, self, args));
    return Value::String(std::move(t));
  }
  if (name == "format_map") {
    PC_ASSIGN_OR_RETURN(Args a, BindArgs(name, std::move(args), {"mapping"}, 1));
    if (!a[0]->is_dict()) return InvalidArgument("format_map() argument must be a mapping");
    CallArgs named;
    for (const auto& [k, v] : a[0]->dict().entries) {
      if (k.is_string()) named.keyword.emplace_back(k.text().str(), v);
    }
    PC_ASSIGN_OR_RETURN(Text t, StrFormat(in, self, named));
    return Value::String(std::move(t));
  }
  return InvalidArgument("str." + std::string(name) + "() is not supported");
}

Result<Value> CallDictMethod(Interpreter& in, const Value& self, std::string_view name,
                             CallArgs args) {
  const DictData& d = self.dict();
  if (name == "get") {
    PC_ASSIGN_OR_RETURN(Args a, BindArgs(name, std::move(args), {"key", "default"}, 1));
    if (const Value* v = d.Find(*a[0])) return *v;
    return a[1].value_or(Value::None());
  }
  PC_RETURN_IF_ERROR(BindArgs(name, std::move(args), {}).status());
  if (name == "copy") return self;
  std::vector<Value> out;
  out.reserve(d.entries.size());
  for (const auto& [key, value] : d.entries) {
    if (name == "keys") {
      out.push_back(key);
    } else if (name == "values") {
      out.push_back(value);
    } else {
      PC_ASSIGN_OR_RETURN(Value pair, in.NewList({key, value}, /*tuple=*/true));
      out.push_back(std::move(pair));
    }
  }
  return in.NewList(std::move(out));
}

Result<Value> CallListMethod(Interpreter& in, const Value& self, std::string_view name,
                             CallArgs args) {
  if (name == "copy") {
    PC_RETURN_IF_ERROR(BindArgs(name, std::move(args), {}).status());
    return self;
  }
  PC_ASSIGN_OR_RETURN(Args a, BindArgs(name, std::move(args), {"value"}, 1));
  const auto& items = self.items();
  int64_t count = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!Equal(items[i], *a[0])) continue;
    if (name == "index") return Value::Int(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") return InvalidArgument("value is not in list");
  return Value::Int(count);
}

class BoundMethod : public Callable {
 public:
  BoundMethod(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  Result<Value> Call(Interpreter& in, CallArgs args) const override {
    if (self_.is_string()) return CallStringMethod(in, self_, name_, std::move(args));
    if (self_.is_dict()) return CallDictMethod(in, self_, name_, std::move(args));
    return CallListMethod(in, self_, name_, std::move(args));
  }
  std::string Repr() const override {
    return "<built-in method " + name_ + " of " + TypeName(self_) + " object>";
  }

 private:
  Value self_;
  std::string name_;
};

bool IsIn(std::string_view name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

std::optional<Value> FindMethod(const Value& self, std::string_view name) {
  bool supported = false, mutating = false;
  if (self.is_string()) {
    supported = IsIn(
        name, {"strip",      "lstrip",   "rstrip",     "split",        "rsplit",       "splitlines",
               "startswith", "endswith", "replace",    "upper",        "lower",        "casefold",
               "swapcase",   "title",    "capitalize", "find",         "rfind",        "index",
               "rindex",     "count",    "isdigit",    "isdecimal",    "isnumeric",    "isalpha",
               "isalnum",    "isspace",  "islower",    "isupper",      "join",         "center",
               "ljust",      "rjust",    "zfill",      "removeprefix", "removesuffix", "partition",
               "rpartition", "format",   "format_map"});
  } else if (self.is_dict()) {
    supported = IsIn(name, {"get", "items", "keys", "values", "copy"});
    mutating = IsIn(name, {"clear", "pop", "popitem", "setdefault", "update"});
  } else if (self.is_list()) {
    supported = IsIn(name, {"index", "count"}) || (!self.is_tuple() && name == "copy");
    mutating =
        !self.is_tuple() && IsIn(name, {"append", "extend", "insert", "remove", "reverse", "sort"});
    if (!self.is_tuple() && IsIn(name, {"pop", "clear"})) {
      // Jinja2's sandbox allows these two, but values are immutable here.
      return Value::Undefined("list." + std::string(name) + "() is not supported");
    }
  }
  if (mutating) {
    return Value::Undefined("access to attribute '" + std::string(name) + "' of '" +
                            TypeName(self) + "' object is unsafe.");
  }
  if (!supported) return std::nullopt;
  return Value::MakeCallable(std::make_shared<BoundMethod>(self, std::string(name)));
}

}  // namespace promptcache::jinja
