// Jinja2's built-in filters (and Hugging Face's tojson), with Jinja2's argument names and
// defaults. Strings keep their user-written marks through every filter (str_ops.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "jinja/builtins.h"
#include "jinja/code_points.h"
#include "jinja/filter_helpers.h"
#include "jinja/interpreter.h"
#include "jinja/json.h"
#include "jinja/str_ops.h"

namespace promptcache::jinja {
namespace {

using FilterFn = Result<Value> (*)(Interpreter&, const Value&, CallArgs);

// Jinja2's soft_str: strings as they are, anything else through str().
Result<Text> SoftStr(Interpreter& in, const Value& v) {
  if (v.is_string()) return v.text();
  return ToText(v, in.limits().max_string_bytes);
}

Result<Value> StrResult(Interpreter& in, Text t) {
  PC_RETURN_IF_ERROR(in.Account(t.size()));
  return Value::String(std::move(t));
}

Result<int64_t> IntArg(const std::optional<Value>& v, int64_t dflt, std::string_view what) {
  if (!v.has_value()) return dflt;
  if (!v->is_integral()) {
    return InvalidArgument(std::string(what) + " must be an integer, not " + TypeName(*v));
  }
  return v->integer();
}

Result<Value> Length(Interpreter& in, const Value& v, CallArgs args) {
  PC_RETURN_IF_ERROR(BindArgs("length", std::move(args), {}).status());
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return Value::Int(0);
    case Value::Kind::kString:
      return Value::Int(static_cast<int64_t>(CodePointCount(v.text().str())));
    case Value::Kind::kList:
      return Value::Int(static_cast<int64_t>(v.items().size()));
    case Value::Kind::kDict:
      return Value::Int(static_cast<int64_t>(v.dict().entries.size()));
    default:
      return InvalidArgument("object of type '" + TypeName(v) + "' has no len()");
  }
}

Result<Value> Default(Interpreter& in, const Value& v, CallArgs args) {
  PC_ASSIGN_OR_RETURN(Args a, BindArgs("default", std::move(args), {"default_value", "boolean"}));
  if (v.is_undefined() || (Flag(a[1], false) && !Truthy(v))) {
    return a[0].value_or(Value::Trusted(""));
  }
  return v;
}

Result<Value> Trim(Interpreter& in, const Value& v, CallArgs args) {
  PC_ASSIGN_OR_RETURN(Args a, BindArgs("trim", std::move(args), {"chars"}));
  PC_ASSIGN_OR_RETURN(Text s, SoftStr(in, v));
  std::optional<std::string> chars;
  if (a[0].has_value() && !a[0]->is_none()) {
    if (!a[0]->is_string()) return InvalidArgument("trim() chars must be a string");
    chars = a[0]->text().str();
  }
  return StrResult(in, Strip(s, chars, true, true));
}

template <CaseChange kChange>
Result<Value> Case(Interpreter& in, const Value& v, CallArgs args) {
  PC_RETURN_IF_ERROR(BindArgs("case", std::move(args), {}).status());
  PC_ASSIGN_OR_RETURN(Text s, SoftStr(in, v));
  return StrResult(in, ChangeCase(s, kChange));
}

// select/reject(attr) and min/max as plain filter functions, for the table below.
template <bool kAttr, bool kKeep>
Result<Value> Select(Interpreter& in, const Value& v, CallArgs args) {
  return SelectFilter(in, v, std::move(args), kAttr, kKeep);
}

template <bool kMax>
Result<Value> MinMax(Interpreter& in, const Value& v, CallArgs args) {
  return MinMaxFilter(in, v, std::move(args), kMax);
}

Result<Value> Replace(Interpreter& in, const Value& v, CallArgs args) {
  PC_ASSIGN_OR_RETURN(Args a, BindArgs("replace", std::move(args), {"old", "new", "count"}, 2));
  PC_ASSIGN_OR_RETURN(Text s, SoftStr(in, v));
  PC_ASSIGN_OR_RETURN(Text old, SoftStr(in, *a[0]));
  PC_ASSIGN_OR_RETURN(Text repl, SoftStr(in, *a[1]));
  int64_t count = -1;
  if (a[2].has_value() && !a[2]->is_none()) {
    PC_ASSIGN_OR_RETURN(count, IntArg(a[2], -1, "count"));
  }
  std::optional<Text> t = Replace(s, old.str(), repl, count, in.limits().max_string_bytes);
  if (!t) return ResourceExhausted("replace grew a string past its limit");
  return StrResult(in, std::move(*t));
}

Result<Value> String(Interpreter& in, const Value& v, CallArgs args) {
  PC_RETURN_IF_ERROR(BindArgs("string", std::move(args), {}).status());
  if (v.is_string()) return v;
  PC_ASSIGN_OR_RETURN(Text s, SoftStr(in, v));
  return StrResult(in, std::move(s));
}

Result<Value> Safe(Interpreter& in, const Value& v, CallArgs args) {
  PC_RETURN_IF_ERROR(BindArgs("safe", std::move(args), {}).status());
  PC_ASSIGN_OR_RETURN(Text s, SoftStr(in, v));
  s.set_markup(true);
  return StrResult(in, std::move(s));
}

Result<Value> Escape(Interpreter& in, const Value& v, CallArgs args) {
  PC_RETURN_IF_ERROR(BindArgs("escape", std::move(args), {}).status());
  if (v.is_string() && v.text().markup()) return v;
  PC_ASSIGN_OR_RETURN(Text s, SoftStr(in, v));
  s.set_markup(false);
  return StrResult(in, HtmlEscape(s));
}

Result<Value> ForceEscape(Interpreter& in, const Value& v, CallArgs args) {
  PC_RETURN_IF_ERROR(BindArgs("forceescape", std::move(args), {}).status());
  PC_ASSIGN_OR_RETURN(Text s, SoftStr(in, v));
  s.set_markup(false);
  return StrResult(in, HtmlEscape(s));
}

Result<Value> Join(Interpreter& in, const Value& v, CallArgs args) {
  PC_ASSIGN_OR_RETURN(Args a, BindArgs("join", std::move(args), {"d", "attribute"}));
  PC_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  Text sep;
  if (a[0].has_value()) {
    PC_ASSIGN_OR_RETURN(sep, SoftStr(in, *a[0]));
  }
  TextBuilder out(in.limits().max_string_bytes);
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (a[1].has_value() && !a[1]->is_none()) {
      PC_ASSIGN_OR_RETURN(item, AttrPath(in, item, *a[1]));
    }
    if (i > 0) out.Append(sep);
    PC_RETURN_IF_ERROR(AppendStr(item, out));
    if (out.overflow()) return ResourceExhausted("join grew a string past its limit");
  }
  return StrResult(in, out.Finish());
}

Result<Value> First(Interpreter& in, const Value& v, CallArgs args) {
  PC_RETURN_IF_ERROR(BindArgs("first", std::move(args), {}).status());
  if (v.is_list()) {
    if (v.items().empty()) return Value::Undefined("No first item, sequence was empty.");
    return v.items().front();
  }
  if (v.is_object()) {
    if (auto* g = dynamic_cast<Generator*>(v.object())) {
      std::optional<Value> item = g->TakeOne();
      if (!item) return Value::Undefined("No first item, sequence was empty.");
      return *item;
    }
  }
  PC_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}

Result<Value> Last(Interpreter& in, const Value& v, CallArgs args) {
  PC_RETURN_IF_ERROR(BindArgs("last", std::move(args), {}).status());
  if (v.is_list()) {
    if (v.items().empty()) return Value::Undefined("No last item, sequence was empty.");
    return v.items().back();
  }
  if (v.is_object()) return InvalidArgument("'" + TypeName(v) + "' object is not reversible");
  PC_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
  return items.back();
}

Result<Value> List(Interpreter& in, const Value& v, CallArgs args) {
  PC_RETURN_IF_ERROR(BindArgs("list", std::move(args), {}).status());
  PC_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  return in.NewList(std::move(items));
}

Result<Value> Items(Interpreter& in, const Value& v, CallArgs args) {
  PC_RETURN_IF_ERROR(BindArgs("items", std::move(args), {}).status());
  if (v.is_undefined()) return in.NewGenerator({});
  if (!v.is_dict()) return InvalidArgument("Can only get item pairs from a mapping.");
  std::vector<Value> pairs;
  for (const auto& [key, value] : v.dict().entries) {
    PC_ASSIGN_OR_RETURN(Value pair, in.NewList({key, value}, /*tuple=*/true));
    pairs.push_back(std::move(pair));
  }
  return in.NewGenerator(std::move(pairs));
}

Result<Value> ToJson(Interpreter& in, const Value& v, CallArgs args) {
  PC_ASSIGN_OR_RETURN(Args a, BindArgs("tojson", std::move(args),
                                       {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonDumpOptions o;
  o.ensure_ascii = Flag(a[0], false);
  o.sort_keys = Flag(a[3], false);
  if (a[1].has_value() && !a[1]->is_none()) {
    if (a[1]->is_string()) {
      o.indent = a[1]->text().str();
    } else if (a[1]->is_integral()) {
      o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(a[1]->integer(), 0, 64)), ' ');
    } else {
      return InvalidArgument("tojson indent must be an integer or a string");
    }
    o.item_separator = ",";
  }
  if (a[2].has_value() && !a[2]->is_none()) {
    const Value& sep = *a[2];
    if (!sep.is_list() || sep.items().size() != 2 || !sep.items()[0].is_string() ||
        !sep.items()[1].is_string()) {
      return InvalidArgument("tojson separators must be a pair of strings");
    }
    o.item_separator = sep.items()[0].text().str();
    o.key_separator = sep.items()[1].text().str();
  }
  TextBuilder out(in.limits().max_string_bytes);
  PC_RETURN_IF_ERROR(DumpJson(v, o, out));
  if (out.overflow()) return ResourceExhausted("tojson grew a string past its limit");
  return StrResult(in, out.Finish());
}

Result<Value> Indent(Interpreter& in, const Value& v, CallArgs args) {
  PC_ASSIGN_OR_RETURN(Args a, BindArgs("indent", std::move(args), {"width", "first", "blank"}));
  if (v.is_undefined()) return InvalidArgument(v.undefined_hint());
  if (!v.is_string()) return InvalidArgument("indent expects a string, not " + TypeName(v));
  Text indention;
  if (a[0].has_value() && a[0]->is_string()) {
    indention = a[0]->text();
  } else {
    PC_ASSIGN_OR_RETURN(int64_t width, IntArg(a[0], 4, "width"));
    indention = Text(std::string(static_cast<size_t>(std::clamp<int64_t>(width, 0, 1 << 16)), ' '));
  }
  // Jinja2 appends a newline before splitting, so a trailing newline leaves an empty last line.
  TextBuilder with_newline;
  with_newline.Append(v.text());
  with_newline.AppendTrusted("\n");
  const std::vector<Text> lines = SplitLines(with_newline.Finish(), false);
  TextBuilder out(in.limits().max_string_bytes);
  if (Flag(a[1], false)) out.Append(indention);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out.AppendTrusted("\n");
      if (Flag(a[2], false) || !lines[i].empty()) out.Append(indention);
    }
    out.Append(lines[i]);
  }
  if (out.overflow()) return ResourceExhausted("indent grew a string past its limit");
  Text t = out.Finish();
  t.set_markup(v.text().markup());
  return StrResult(in, std::move(t));
}

// Python's int() and float() on strings: surrounding whitespace, a sign, underscores between
// digits; float() also takes exponents, "inf" and "nan".
std::optional<int64_t> ParseInt(std::string_view s, int base) {
  const size_t b = s.find_first_not_of(" \t\n\r\f\v"), e = s.find_last_not_of(" \t\n\r\f\v");
  if (b == std::string_view::npos) return std::nullopt;
  s = s.substr(b, e - b + 1);
  std::string digits;
  size_t i = 0;
  if (s[0] == '+' || s[0] == '-') digits += s[i++];
  if (base == 16 && s.size() > i + 1 && s[i] == '0' && (s[i + 1] == 'x' || s[i + 1] == 'X')) i += 2;
  for (; i < s.size(); ++i) {
    if (s[i] == '_' && !digits.empty() && i + 1 < s.size() && s[i + 1] != '_') continue;
    digits += s[i];
  }
  if (digits.empty() || digits == "+" || digits == "-") return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(digits.c_str(), &end, base);
  if (*end != '\0' || errno == ERANGE || !std::isalnum(static_cast<unsigned char>(digits.back()))) {
    return std::nullopt;
  }
  return v;
}

std::optional<double> ParseFloat(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\n\r\f\v"), e = s.find_last_not_of(" \t\n\r\f\v");
  if (b == std::string_view::npos) return std::nullopt;
  std::string t;
  for (char c : s.substr(b, e - b + 1)) {
    if (c != '_') t += c;
  }
  if (t.empty() ||
      (t.size() > 1 && (t[0] == '0' && std::isalpha(static_cast<unsigned char>(t[1]))))) {
    return std::nullopt;
  }
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (*end != '\0') return std::nullopt;
  return v;
}

Result<Value> Int(Interpreter& in, const Value& v, CallArgs args) {
  PC_ASSIGN_OR_RETURN(Args a, BindArgs("int", std::move(args), {"default", "base"}));
  const Value dflt = a[0].value_or(Value::Int(0));
  PC_ASSIGN_OR_RETURN(int64_t base, IntArg(a[1], 10, "base"));
  if (v.is_integral()) return Value::Int(v.integer());
  double f = 0;
  if (v.is_float()) {
    f = v.number();
  } else if (v.is_string()) {
    if (base >= 2 && base <= 36) {
      if (std::optional<int64_t> i = ParseInt(v.text().str(), static_cast<int>(base))) {
        return Value::Int(*i);
      }
    }
    std::optional<double> parsed = ParseFloat(v.text().str());
    if (!parsed) return dflt;
    f = *parsed;
  } else {
    return dflt;
  }
  if (std::isnan(f)) return dflt;
  if (std::isinf(f) || std::fabs(f) >= 9.2e18) {
    return InvalidArgument("cannot convert float infinity or a huge float to integer");
  }
  return Value::Int(static_cast<int64_t>(std::trunc(f)));
}

Result<Value> Float(Interpreter& in, const Value& v, CallArgs args) {
  PC_ASSIGN_OR_RETURN(Args a, BindArgs("float", std::move(args), {"default"}));
  if (v.is_number()) return Value::Float(v.number());
  if (v.is_string()) {
    if (std::optional<double> f = ParseFloat(v.text().str())) return Value::Float(*f);
  }
  return a[0].value_or(Value::Float(0.0));
}

Result<Value> Abs(Interpreter& in, const Value& v, CallArgs args) {
  PC_RETURN_IF_ERROR(BindArgs("abs", std::move(args), {}).status());
  if (v.is_float()) return Value::Float(std::fabs(v.number()));
  if (v.is_integral()) {
    if (v.integer() == INT64_MIN) return InvalidArgument("integer overflow");
    return Value::Int(std::llabs(v.integer()));
  }
  return InvalidArgument("bad operand type for abs(): '" + TypeName(v) + "'");
}

Result<Value> Round(Interpreter& in, const Value& v, CallArgs args) {
  PC_ASSIGN_OR_RETURN(Args a, BindArgs("round", std::move(args), {"precision", "method"}));
  PC_ASSIGN_OR_RETURN(int64_t precision, IntArg(a[0], 0, "precision"));
  std::string method = "common";
  if (a[1].has_value()) {
    if (!a[1]->is_string()) return InvalidArgument("method must be a string");
    method = a[1]->text().str();
  }
  if (method != "common" && method != "ceil" && method != "floor") {
    return InvalidArgument("method must be common, ceil or floor");
  }
  if (!v.is_number()) return InvalidArgument("round() needs a number, not " + TypeName(v));
  if (method == "common" && v.is_integral()) return Value::Int(v.integer());
  precision = std::clamp<int64_t>(precision, -300, 300);
  if (method == "common") {
    // printf rounds the exact binary value half-to-even, as Python's round() does.
    if (precision >= 0) {
      char buf[512];
      std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), v.number());
      return Value::Float(std::strtod(buf, nullptr));
    }
    const double scale = std::pow(10.0, static_cast<double>(-precision));
    return Value::Float(std::nearbyint(v.number() / scale) * scale);
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.number() * scale;
  return Value::Float((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Result<Value> Center(Interpreter& in, const Value& v, CallArgs args) {
  PC_ASSIGN_OR_RETURN(Args a, BindArgs("center", std::move(args), {"width"}));
  PC_ASSIGN_OR_RETURN(int64_t width, IntArg(a[0], 80, "width"));
  PC_ASSIGN_OR_RETURN(Text s, SoftStr(in, v));
  PC_ASSIGN_OR_RETURN(Text t, Pad(s, width, ' ', '^', in.limits().max_string_bytes));
  return StrResult(in, std::move(t));
}

Result<Value> Format(Interpreter& in, const Value& v, CallArgs args) {
  if (!args.positional.empty() && !args.keyword.empty()) {
    return InvalidArgument("can't handle positional and keyword arguments at the same time");
  }
  PC_ASSIGN_OR_RETURN(Text s, SoftStr(in, v));
  Value operand;
  if (!args.keyword.empty()) {
    DictData d;
    for (auto& [k, val] : args.keyword) d.Set(Value::Trusted(k), std::move(val));
    PC_ASSIGN_OR_RETURN(operand, in.NewDict(std::move(d)));
  } else {
    PC_ASSIGN_OR_RETURN(operand, in.NewList(std::move(args.positional), /*tuple=*/true));
  }
  PC_ASSIGN_OR_RETURN(Text t, PercentFormat(in, s, operand));
  return StrResult(in, std::move(t));
}

Result<Value> Truncate(Interpreter& in, const Value& v, CallArgs args) {
  PC_ASSIGN_OR_RETURN(
      Args a, BindArgs("truncate", std::move(args), {"length", "killwords", "end", "leeway"}));
  PC_ASSIGN_OR_RETURN(Text s, SoftStr(in, v));
  PC_ASSIGN_OR_RETURN(int64_t length, IntArg(a[0], 255, "length"));
  PC_ASSIGN_OR_RETURN(int64_t leeway, IntArg(a[3], 5, "leeway"));
  Text end("...");
  if (a[2].has_value()) {
    PC_ASSIGN_OR_RETURN(end, SoftStr(in, *a[2]));
  }
  const int64_t end_len = static_cast<int64_t>(CodePointCount(end.str()));
  if (length < end_len) return InvalidArgument("expected length >= " + std::to_string(end_len));
  if (leeway < 0) return InvalidArgument("expected leeway >= 0");
  const std::vector<size_t> offsets = CodePointOffsets(s.str());
  const int64_t n = static_cast<int64_t>(offsets.size()) - 1;
  if (n <= length + leeway) return Value::String(s);
  Text head = s.Slice(0, offsets[length - end_len]);
  if (!Flag(a[1], false)) {
    const size_t space = head.str().rfind(' ');
    if (space != std::string::npos) head = head.Slice(0, space);
  }
  TextBuilder out;
  out.Append(head);
  out.Append(end);
  return StrResult(in, out.Finish());
}

Result<Value> WordCount(Interpreter& in, const Value& v, CallArgs args) {
  PC_RETURN_IF_ERROR(BindArgs("wordcount", std::move(args), {}).status());
  PC_ASSIGN_OR_RETURN(Text s, SoftStr(in, v));
  int64_t words = 0;
  bool in_word = false;
  char32_t c;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    len = DecodeUtf8(s.str(), pos, &c);
    const bool word = IsAlpha(c) || IsDigit(c) || c == '_';
    if (word && !in_word) ++words;
    in_word = word;
  }
  return Value::Int(words);
}

Result<Value> Reverse(Interpreter& in, const Value& v, CallArgs args) {
  PC_RETURN_IF_ERROR(BindArgs("reverse", std::move(args), {}).status());
  const bool sequence = v.is_list() || v.is_dict();
  PC_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  std::reverse(items.begin(), items.end());
  // Python's reversed() of a sequence is an iterator; anything else becomes a reversed list.
  if (sequence) return in.NewGenerator(std::move(items));
  if (!v.is_string()) return in.NewList(std::move(items));
  TextBuilder out;
  for (const Value& c : items) out.Append(c.text());
  return StrResult(in, out.Finish());
}

Result<Value> Attr(Interpreter& in, const Value& v, CallArgs args) {
  PC_ASSIGN_OR_RETURN(Args a, BindArgs("attr", std::move(args), {"name"}, 1));
  if (!a[0]->is_string()) return InvalidArgument("attribute name must be a string");
  const std::string& name = a[0]->text().str();
  if (v.is_undefined()) return InvalidArgument(v.undefined_hint());
  if (v.is_object()) return v.object()->GetAttr(name);
  if (std::optional<Value> m = FindMethod(v, name)) return *m;
  return Value::Undefined("'" + TypeName(v) + " object' has no attribute '" + name + "'");
}

Result<Value> Batch(Interpreter& in, const Value& v, CallArgs args) {
  PC_ASSIGN_OR_RETURN(Args a, BindArgs("batch", std::move(args), {"linecount", "fill_with"}, 1));
  PC_ASSIGN_OR_RETURN(int64_t size, IntArg(a[0], 1, "linecount"));
  if (size <= 0) return InvalidArgument("batch size must be positive");
  PC_ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
  std::vector<Value> batches;
  for (size_t i = 0; i < items.size(); i += static_cast<size_t>(size)) {
    std::vector<Value> batch;
    for (size_t j = i; j < items.size() && j < i + static_cast<size_t>(size); ++j) {
      batch.push_back(items[j]);
    }
    while (a[1].has_value() && !a[1]->is_none() && batch.size() < static_cast<size_t>(size)) {
      batch.push_back(*a[1]);
    }
    PC_ASSIGN_OR_RETURN(Value b, in.NewList(std::move(batch)));
    batches.push_back(std::move(b));
  }
  return in.NewGenerator(std::move(batches));
}

const std::unordered_map<std::string_view, FilterFn>& Filters() {
  static const auto* filters = new std::unordered_map<std::string_view, FilterFn>{
      {"abs", Abs},
      {"attr", Attr},
      {"batch", Batch},
      {"capitalize", Case<CaseChange::kCapitalize>},
      {"center", Center},
      {"count", Length},
      {"d", Default},
      {"default", Default},
      {"dictsort", DictSortFilter},
      {"e", Escape},
      {"escape", Escape},
      {"first", First},
      {"float", Float},
      {"forceescape", ForceEscape},
      {"format", Format},
      {"indent", Indent},
      {"int", Int},
      {"items", Items},
      {"join", Join},
      {"last", Last},
      {"length", Length},
      {"list", List},
      {"lower", Case<CaseChange::kLower>},
      {"map", MapFilter},
      {"max", MinMax<true>},
      {"min", MinMax<false>},
      {"reject", Select<false, false>},
      {"rejectattr", Select<true, false>},
      {"replace", Replace},
      {"reverse", Reverse},
      {"round", Round},
      {"safe", Safe},
      {"select", Select<false, true>},
      {"selectattr", Select<true, true>},
      {"sort", SortFilter},
      {"string", String},
      {"sum", SumFilter},
      {"title", Case<CaseChange::kJinjaTitle>},
      {"tojson", ToJson},
      {"trim", Trim},
      {"truncate", Truncate},
      {"unique", UniqueFilter},
      {"upper", Case<CaseChange::kUpper>},
      {"wordcount", WordCount},
  };
  return *filters;
}

}  // namespace

bool IsFilterName(std::string_view name) { return Filters().count(name) > 0; }

Result<Value> ApplyFilter(Interpreter& in, std::string_view name, const Value& input,
                          CallArgs args) {
  const auto it = Filters().find(name);
  if (it == Filters().end()) return InvalidArgument("no filter named '" + std::string(name) + "'");
  return it->second(in, input, std::move(args));
}

}  // namespace promptcache::jinja
