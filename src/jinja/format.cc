// Python's string formatting: the % operator (and the format filter) and str.format.
#include <cmath>
#include <cstdio>

#include "jinja/interpreter.h"
#include "jinja/str_ops.h"
#include "jinja/code_points.h"

namespace promptcache::jinja {
namespace {

struct Spec {
  char32_t fill = ' ';
  char align = '\0';  // < > ^ = or none
  char sign = '-';
  bool alternate = false;
  bool zero = false;
  int64_t width = -1;
  int64_t precision = -1;
  char type = '\0';
};

std::string CFormat(const char* fmt, double v, int64_t precision) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), fmt, static_cast<int>(precision), v);
  return buf;
}

// A number as Python's format() writes it for `spec` (without padding).
Result<std::string> FormatNumber(const Value& v, const Spec& spec) {
  char type = spec.type;
  std::string body;
  bool negative = false;
  if (type == 'd' || type == 'i' || type == 'u' || type == 'x' || type == 'X' || type == 'o' ||
      type == 'b' || type == 'c' || (type == '\0' && v.is_integral())) {
    int64_t i = v.is_float() ? static_cast<int64_t>(std::trunc(v.number())) : v.integer();
    if (type == 'c') {
      AppendUtf8(body, static_cast<char32_t>(i));
      return body;
    }
    negative = i < 0;
    uint64_t u = negative ? 0 - static_cast<uint64_t>(i) : static_cast<uint64_t>(i);
    const int base = type == 'x' || type == 'X' ? 16 : type == 'o' ? 8 : type == 'b' ? 2 : 10;
    do {
      const int d = static_cast<int>(u % base);
      body.insert(body.begin(),
                  static_cast<char>(d < 10 ? '0' + d : (type == 'X' ? 'A' : 'a') + d - 10));
      u /= base;
    } while (u > 0);
    if (spec.alternate && base != 10) {
      body.insert(0, base == 16 ? (type == 'X' ? "0X" : "0x") : base == 8 ? "0o" : "0b");
    }
  } else {
    double f = v.number();
    negative = std::signbit(f) && !std::isnan(f);
    f = std::fabs(f);
    const int64_t p = spec.precision < 0 ? 6 : spec.precision;
    if (std::isinf(f) || std::isnan(f)) {
      body = std::isnan(f) ? "nan" : "inf";
      if (type == 'F' || type == 'E' || type == 'G') {
        for (char& ch : body) ch = static_cast<char>(std::toupper(ch));
      }
    } else if (type == 'f' || type == 'F') {
      body = CFormat("%.*f", f, p);
    } else if (type == 'e' || type == 'E') {
      body = CFormat(type == 'e' ? "%.*e" : "%.*E", f, p);
    } else if (type == 'g' || type == 'G') {
      body = CFormat(type == 'g' ? "%.*g" : "%.*G", f, p == 0 ? 1 : p);
    } else if (type == '%') {
      body = CFormat("%.*f", f * 100, p) + "%";
    } else if (type == '\0') {
      body = spec.precision < 0 ? FloatRepr(f) : CFormat("%.*g", f, spec.precision);
    } else {
      return InvalidArgument(std::string("unknown format code '") + type + "' for a number");
    }
  }
  if (negative) return "-" + body;
  if (spec.sign == '+') return "+" + body;
  if (spec.sign == ' ') return " " + body;
  return body;
}

// Pads `t` to the spec's width; numbers align right and may zero-pad after the sign.
Result<Text> ApplyWidth(Text t, const Spec& spec, bool number, size_t cap) {
  if (spec.width < 0) return t;
  char align = spec.align ? spec.align : number ? '>' : '<';
  char32_t fill = spec.fill;
  if (spec.zero && !spec.align) {
    fill = '0';
    align = number ? '=' : '<';
  }
  if (align == '=') {  // padding between the sign and the digits
    const std::string& s = t.str();
    const size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+' || s[0] == ' ') ? 1 : 0;
    PC_ASSIGN_OR_RETURN(Text digits, Pad(t.Slice(sign, s.size()),
                                         spec.width - static_cast<int64_t>(sign), fill, '>', cap));
    TextBuilder out;
    out.Append(t, 0, sign);
    out.Append(digits);
    return out.Finish();
  }
  return Pad(t, spec.width, fill, align, cap);
}

Result<Text> FormatValue(const Value& v, const Spec& spec, size_t cap) {
  if (v.is_number() && !(v.is_bool() && spec.type == '\0')) {
    if (spec.type == 's') return InvalidArgument("unknown format code 's' for a number");
    PC_ASSIGN_OR_RETURN(std::string s, FormatNumber(v, spec));
    return ApplyWidth(Text(s), spec, true, cap);
  }
  if (spec.type != '\0' && spec.type != 's') {
    return InvalidArgument(std::string("unknown format code '") + spec.type + "' for '" +
                           TypeName(v) + "'");
  }
  PC_ASSIGN_OR_RETURN(Text t, ToText(v, cap));
  if (spec.precision >= 0) {
    const std::vector<size_t> offsets = CodePointOffsets(t.str());
    if (static_cast<size_t>(spec.precision) + 1 < offsets.size()) {
      t = t.Slice(0, offsets[spec.precision]);
    }
  }
  return ApplyWidth(std::move(t), spec, false, cap);
}

// Parses "[[fill]align][sign][#][0][width][,][.precision][type]".
Result<Spec> ParseSpec(std::string_view s) {
  Spec spec;
  size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  char32_t first = 0;
  const size_t first_len = s.empty() ? 0 : DecodeUtf8(s, 0, &first);
  if (first_len < s.size() && is_align(s[first_len])) {
    spec.fill = first;
    spec.align = s[first_len];
    i = first_len + 1;
  } else if (!s.empty() && is_align(s[0])) {
    spec.align = s[0];
    i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) spec.sign = s[i++];
  if (i < s.size() && s[i] == '#') spec.alternate = true, ++i;
  if (i < s.size() && s[i] == '0') spec.zero = true, ++i;
  auto number = [&]() -> int64_t {
    int64_t n = -1;
    while (i < s.size() && IsDigit(static_cast<unsigned char>(s[i]))) {
      n = std::max<int64_t>(n, 0) * 10 + (s[i++] - '0');
      if (n > (int64_t(1) << 40)) return int64_t(1) << 40;
    }
    return n;
  };
  spec.width = number();
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) {
    return InvalidArgument("thousands separators in format specs are not supported");
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    spec.precision = number();
    if (spec.precision < 0) return InvalidArgument("format specifier missing precision");
  }
  if (i < s.size()) spec.type = s[i++];
  if (i < s.size()) return InvalidArgument("invalid format specifier '" + std::string(s) + "'");
  return spec;
}

// The flags, width and precision of a % conversion, from f[*i] on (left at the type letter).
Spec ParsePercentSpec(std::string_view f, size_t* i) {
  Spec spec;
  size_t& p = *i;
  for (; p < f.size() && std::string_view("-+ #0").find(f[p]) != std::string_view::npos; ++p) {
    if (f[p] == '-') spec.align = '<';
    if (f[p] == '+' || f[p] == ' ') spec.sign = f[p];
    if (f[p] == '#') spec.alternate = true;
    if (f[p] == '0') spec.zero = true;
  }
  for (; p < f.size() && IsDigit(static_cast<unsigned char>(f[p])); ++p) {
    spec.width = std::min<int64_t>(std::max<int64_t>(spec.width, 0) * 10 + (f[p] - '0'), 1 << 30);
  }
  if (p < f.size() && f[p] == '.') {
    spec.precision = 0;
    for (++p; p < f.size() && IsDigit(static_cast<unsigned char>(f[p])); ++p) {
      spec.precision = std::min<int64_t>(spec.precision * 10 + (f[p] - '0'), 1 << 20);
    }
  }
  if (spec.align == '<') spec.zero = false;
  return spec;
}

// One % conversion of `arg`: %s %r %a, or a number's %d %i %u %o %x %X %e %E %f %F %g %G %c.
Result<Text> PercentConversion(const Value& arg, char type, Spec spec, size_t cap) {
  if (type == 's' || type == 'r' || type == 'a') {
    spec.type = '\0';
    spec.zero = false;
    if (!spec.align) spec.align = '>';
    if (type == 's') {
      PC_ASSIGN_OR_RETURN(Text plain, ToText(arg, cap));
      return FormatValue(Value::String(std::move(plain)), spec, cap);
    }
    TextBuilder repr(cap);
    PC_RETURN_IF_ERROR(AppendRepr(arg, repr));
    return ApplyWidth(repr.Finish(), spec, false, cap);
  }
  if (std::string_view("diouxXeEfFgGc").find(type) == std::string_view::npos) {
    return InvalidArgument(std::string("unsupported format character '") + type + "'");
  }
  if (!arg.is_number()) {
    return InvalidArgument(std::string("%") + type + " format: a number is required, not " +
                           TypeName(arg));
  }
  spec.type = type == 'i' || type == 'u' ? 'd' : type;
  return FormatValue(arg, spec, cap);
}

}  // namespace

Result<Text> PercentFormat(Interpreter& in, const Text& format, const Value& args) {
  const std::string& f = format.str();
  const size_t cap = in.limits().max_string_bytes;
  std::vector<Value> positional;
  if (args.is_tuple()) {
    positional = args.items();
  } else if (!args.is_dict()) {
    positional.push_back(args);
  }
  size_t next = 0;
  TextBuilder out(cap);
  size_t at = 0;
  for (size_t pos; (pos = f.find('%', at)) != std::string::npos;) {
    out.Append(format, at, pos);
    size_t i = pos + 1;
    if (i < f.size() && f[i] == '%') {
      out.AppendTrusted("%");
      at = i + 1;
      continue;
    }
    const Value* arg = nullptr;
    if (i < f.size() && f[i] == '(') {
      const size_t close = f.find(')', i);
      if (close == std::string::npos) return InvalidArgument("incomplete format key");
      if (!args.is_dict()) return InvalidArgument("format requires a mapping");
      arg = args.dict().Find(std::string_view(f).substr(i + 1, close - i - 1));
      if (arg == nullptr) return InvalidArgument("format key not found");
      i = close + 1;
    }
    Spec spec = ParsePercentSpec(f, &i);
    if (i >= f.size()) return InvalidArgument("incomplete format");
    const char type = f[i];
    at = i + 1;
    if (arg == nullptr) {
      if (next >= positional.size()) {
        return InvalidArgument("not enough arguments for format string");
      }
      arg = &positional[next++];
    }
    PC_ASSIGN_OR_RETURN(Text piece, PercentConversion(*arg, type, spec, cap));
    out.Append(piece);
  }
  out.Append(format, at, f.size());
  if (!args.is_dict() && next < positional.size()) {
    return InvalidArgument("not all arguments converted during string formatting");
  }
  if (out.overflow()) return ResourceExhausted("a formatted string grew past its limit");
  return out.Finish();
}

namespace {

// The value a str.format field names: "0", "name", "0.attr", "name[key]", "" (the next one).
Result<Value> FieldValue(Interpreter& in, std::string_view field, const CallArgs& args,
                         size_t* next) {
  size_t end = field.find_first_of(".[");
  std::string_view head = field.substr(0, end);
  Value v;
  if (head.empty() || IsDigit(static_cast<unsigned char>(head[0]))) {
    size_t index = *next;
    if (head.empty()) {
      ++*next;
    } else {
      index = 0;
      for (char c : head) index = index * 10 + (c - '0');
    }
    if (index >= args.positional.size()) {
      return InvalidArgument("Replacement index " + std::to_string(index) +
                             " out of range for positional args tuple");
    }
    v = args.positional[index];
  } else {
    bool found = false;
    for (const auto& [key, value] : args.keyword) {
      if (key == head) v = value, found = true;
    }
    if (!found) return InvalidArgument("format key '" + std::string(head) + "' not found");
  }
  while (end != std::string_view::npos && end < field.size()) {
    if (field[end] == '.') {
      const size_t stop = field.find_first_of(".[", end + 1);
      PC_ASSIGN_OR_RETURN(v, in.GetAttr(v, field.substr(end + 1, stop - end - 1)));
      end = stop;
    } else {
      const size_t close = field.find(']', end);
      if (close == std::string_view::npos) return InvalidArgument("missing ']' in format string");
      std::string_view key = field.substr(end + 1, close - end - 1);
      Value k = Value::Trusted(key);
      if (!key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
            return IsDigit(static_cast<unsigned char>(c));
          })) {
        k = Value::Int(std::stoll(std::string(key.substr(0, 18))));
      }
      PC_ASSIGN_OR_RETURN(v, in.GetItem(v, k));
      end = close + 1;
    }
  }
  return v;
}

}  // namespace

Result<Text> StrFormat(Interpreter& in, const Text& format, const CallArgs& args) {
  const std::string& f = format.str();
  const size_t cap = in.limits().max_string_bytes;
  TextBuilder out(cap);
  size_t next = 0;
  size_t at = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out.Append(format, at, i + 1);
        at = ++i + 1;
        continue;
      }
      return InvalidArgument("single '}' encountered in format string");
    }
    if (f[i] != '{') continue;
    out.Append(format, at, i);
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out.AppendTrusted("{");
      at = ++i + 1;
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string::npos) return InvalidArgument("expected '}' before end of string");
    std::string_view field(f.data() + i + 1, close - i - 1);
    if (field.find('{') != std::string_view::npos) {
      return InvalidArgument("nested replacement fields are not supported");
    }
    std::string_view spec_text;
    if (const size_t colon = field.find(':'); colon != std::string_view::npos) {
      spec_text = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    char conversion = '\0';
    if (field.size() >= 2 && field[field.size() - 2] == '!') {
      conversion = field.back();
      field.remove_suffix(2);
    }
    PC_ASSIGN_OR_RETURN(Value v, FieldValue(in, field, args, &next));
    if (conversion == 'r' || conversion == 'a') {
      TextBuilder repr(cap);
      PC_RETURN_IF_ERROR(AppendRepr(v, repr));
      v = Value::String(repr.Finish());
    } else if (conversion == 's') {
      PC_ASSIGN_OR_RETURN(Text t, ToText(v, cap));
      v = Value::String(std::move(t));
    } else if (conversion != '\0') {
      return InvalidArgument(std::string("unknown conversion specifier ") + conversion);
    }
    PC_ASSIGN_OR_RETURN(Spec spec, ParseSpec(spec_text));
    PC_ASSIGN_OR_RETURN(Text piece, FormatValue(v, spec, cap));
    out.Append(piece);
    i = close;
    at = close + 1;
  }
  out.Append(format, at, f.size());
  if (out.overflow()) return ResourceExhausted("a formatted string grew past its limit");
  return out.Finish();
}

}  // namespace promptcache::jinja
