#include "jinja/json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "jinja/code_points.h"

namespace promptcache::jinja {
namespace {

Result<Value> FromJsonAt(const nlohmann::ordered_json& j, bool user, const TrustedString& trusted,
                         std::string_view key, int depth) {
  if (depth > kMaxNesting) {
    return InvalidArgument("JSON nests deeper than " + std::to_string(kMaxNesting) + " levels");
  }
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::object: {
      DictData dict;
      for (const auto& [key, value] : j.items()) {
        PC_ASSIGN_OR_RETURN(Value v, FromJsonAt(value, user, trusted, key, depth + 1));
        dict.Set(Value::String(Text(key, user)), std::move(v));
      }
      return Value::Dict(std::move(dict));
    }
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) {
        PC_ASSIGN_OR_RETURN(Value v, FromJsonAt(item, user, trusted, key, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::string: {
      const std::string& s = j.get_ref<const std::string&>();
      return Value::String(Text(s, user && !(trusted && trusted(key, s))));
    }
    case nlohmann::ordered_json::value_t::boolean:
      return Value::Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::Float(static_cast<double>(u));
      return Value::Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::Float(j.get<double>());
    default:
      return Value::None();
  }
}

void DumpString(const Text& t, bool ensure_ascii, TextBuilder& out) {
  const std::string& s = t.str();
  out.AppendTrusted("\"");
  size_t at = 0;
  char32_t c;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) {
    len = DecodeUtf8(s, pos, &c);
    std::string esc;
    switch (c) {
      case '"':
        esc = "\\\"";
        break;
      case '\\':
        esc = "\\\\";
        break;
      case '\n':
        esc = "\\n";
        break;
      case '\r':
        esc = "\\r";
        break;
      case '\t':
        esc = "\\t";
        break;
      case '\b':
        esc = "\\b";
        break;
      case '\f':
        esc = "\\f";
        break;
      default: {
        const bool escape = c < 0x20 || (ensure_ascii && c > 0x7E);
        if (!escape) continue;
        char buf[16];
        if (c >= 0x10000 && !(c >= 0xDC80 && c <= 0xDCFF)) {
          const char32_t v = c - 0x10000;
          std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x",
                        static_cast<unsigned>(0xD800 + (v >> 10)),
                        static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
        } else {
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
        }
        esc = buf;
      }
    }
    out.Append(t, at, pos);
    out.AppendLike(esc, t, pos);
    at = pos + len;
  }
  out.Append(t, at, s.size());
  out.AppendTrusted("\"");
}

void DumpFloat(double f, TextBuilder& out) {
  if (std::isnan(f)) {
    out.AppendTrusted("NaN");
  } else if (std::isinf(f)) {
    out.AppendTrusted(f > 0 ? "Infinity" : "-Infinity");
  } else {
    out.AppendTrusted(FloatRepr(f));
  }
}

// A dict key as json.dumps turns it into a string.
Result<Value> KeyString(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString:
      return key;
    case Value::Kind::kBool:
      return Value::Trusted(key.boolean() ? "true" : "false");
    case Value::Kind::kNone:
      return Value::Trusted("null");
    case Value::Kind::kInt:
      return Value::Trusted(std::to_string(key.integer()));
    case Value::Kind::kFloat: {
      TextBuilder b;
      DumpFloat(key.number(), b);
      return Value::String(b.Finish());
    }
    default:
      return InvalidArgument("keys must be str, int, float, bool or None, not " + TypeName(key));
  }
}

void NewLine(const JsonDumpOptions& o, int level, TextBuilder& out) {
  out.AppendTrusted("\n");
  for (int i = 0; i < level; ++i) out.AppendTrusted(*o.indent);
}

Status DumpList(const Value& v, const JsonDumpOptions& o, TextBuilder& out, int depth) {
  const auto& items = v.items();
  if (items.empty()) {
    out.AppendTrusted("[]");
    return Status::Ok();
  }
  out.AppendTrusted("[");
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out.AppendTrusted(o.item_separator);
    if (o.indent) NewLine(o, depth + 1, out);
    PC_RETURN_IF_ERROR(DumpJson(items[i], o, out, depth + 1));
  }
  if (o.indent) NewLine(o, depth, out);
  out.AppendTrusted("]");
  return Status::Ok();
}

Status DumpDict(const Value& v, const JsonDumpOptions& o, TextBuilder& out, int depth) {
  const auto& entries = v.dict().entries;
  if (entries.empty()) {
    out.AppendTrusted("{}");
    return Status::Ok();
  }
  std::vector<const std::pair<Value, Value>*> order;
  for (const auto& e : entries) order.push_back(&e);
  if (o.sort_keys) {
    Status error;
    std::stable_sort(order.begin(), order.end(), [&](const auto* a, const auto* b) {
      Result<int> c = Compare(a->first, b->first, "<");
      if (!c.ok()) error = c.status();
      return c.ok() && *c < 0;
    });
    PC_RETURN_IF_ERROR(error);
  }
  out.AppendTrusted("{");
  for (size_t i = 0; i < order.size(); ++i) {
    if (i > 0) out.AppendTrusted(o.item_separator);
    if (o.indent) NewLine(o, depth + 1, out);
    PC_ASSIGN_OR_RETURN(Value key, KeyString(order[i]->first));
    DumpString(key.text(), o.ensure_ascii, out);
    out.AppendTrusted(o.key_separator);
    PC_RETURN_IF_ERROR(DumpJson(order[i]->second, o, out, depth + 1));
  }
  if (o.indent) NewLine(o, depth, out);
  out.AppendTrusted("}");
  return Status::Ok();
}

}  // namespace

Result<Value> FromJson(const nlohmann::ordered_json& json, bool user_written,
                       const TrustedString& trusted) {
  return FromJsonAt(json, user_written, trusted, "", 0);
}

Status DumpJson(const Value& v, const JsonDumpOptions& options, TextBuilder& out, int depth) {
  if (depth > kMaxNesting) return InvalidArgument("value nests too deep for JSON");
  switch (v.kind()) {
    case Value::Kind::kNone:
      out.AppendTrusted("null");
      return Status::Ok();
    case Value::Kind::kBool:
      out.AppendTrusted(v.boolean() ? "true" : "false");
      return Status::Ok();
    case Value::Kind::kInt:
      out.AppendTrusted(std::to_string(v.integer()));
      return Status::Ok();
    case Value::Kind::kFloat:
      DumpFloat(v.number(), out);
      return Status::Ok();
    case Value::Kind::kString:
      DumpString(v.text(), options.ensure_ascii, out);
      return Status::Ok();
    case Value::Kind::kList:
      if (v.is_range()) return InvalidArgument("Object of type range is not JSON serializable");
      return DumpList(v, options, out, depth);
    case Value::Kind::kDict:
      return DumpDict(v, options, out, depth);
    default:
      return InvalidArgument("Object of type " + TypeName(v) + " is not JSON serializable");
  }
}

}  // namespace promptcache::jinja
