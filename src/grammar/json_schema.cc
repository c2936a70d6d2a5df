#include "grammar/json_schema.h"

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "grammar/grammar.h"
#include "grammar/json_depth.h"

namespace promptcache {
namespace {

using ojson = nlohmann::ordered_json;

// Shared rules. Whitespace and digits are bounded so that any generation can end.
constexpr const char* kCommonRules = R"(ws ::= | " " | "\n" [ ]{0,8}
char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
string ::= "\"" char* "\""
integer ::= "-"? ("0" | [1-9] [0-9]{0,15})
number ::= integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
)";

constexpr int kMaxDepth = kMaxSchemaDepth;
constexpr int kMaxBound = 1000;  // minLength/maxLength/minItems/maxItems

class Converter {
 public:
  Converter(const ojson& root, std::string prefix) : root_(root), prefix_(std::move(prefix)) {}

  // The top expression, and the schema's own rules in *rules.
  Result<std::string> Run(std::string* rules) {
    PC_ASSIGN_OR_RETURN(std::string top, Rule(root_, "", 0));
    for (const std::string& r : rules_) *rules += r + "\n";
    return top;
  }

 private:
  Status Unsupported(const std::string& where, const std::string& what) const {
    return InvalidArgument("JSON schema: '" + (where.empty() ? what : where + "." + what) +
                           "' is not supported");
  }

  std::string NewRule(const std::string& body) {
    const std::string name = prefix_ + std::to_string(rules_.size());
    rules_.push_back(name + " ::= " + body);
    return name;
  }

  Result<int> Bound(const ojson& s, const char* key, const std::string& where, int dflt) {
    auto it = s.find(key);
    if (it == s.end()) return dflt;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > kMaxBound) {
      return InvalidArgument("JSON schema: '" + where + (where.empty() ? "" : ".") + key +
                             "' must be an integer from 0 to " + std::to_string(kMaxBound));
    }
    return static_cast<int>(it->get<int64_t>());
  }

  static std::string Repeat(const std::string& item, int min, int max) {
    if (max < 0) return "(" + item + "){" + std::to_string(min) + ",}";
    return "(" + item + "){" + std::to_string(min) + "," + std::to_string(max) + "}";
  }

  // The grammar expression (a rule name or a literal) for schema `s` at `where`.
  Result<std::string> Rule(const ojson& s, const std::string& where, int depth) {
    if (depth > kMaxDepth) {
      const std::string w = where.size() <= 120
                                ? where
                                : where.substr(0, 50) + "..." + where.substr(where.size() - 50);
      return InvalidArgument("JSON schema: '" + w + "' is nested more than " +
                             std::to_string(kMaxDepth) + " schemas deep");
    }
    if (s.is_boolean()) {
      if (s.get<bool>()) return std::string("value");
      return InvalidArgument("JSON schema: '" + where + "' is false (nothing is valid)");
    }
    if (!s.is_object()) return InvalidArgument("JSON schema: '" + where + "' must be an object");
    static const std::set<std::string> kAnnotations = {
        "title", "description", "default", "examples", "$schema", "$id", "$comment", "strict"};
    static const std::set<std::string> kKnown = {
        "type",      "properties", "required",    "additionalProperties",
        "items",     "enum",       "const",       "anyOf",
        "$ref",      "$defs",      "definitions", "minLength",
        "maxLength", "minItems",   "maxItems"};
    for (const auto& [key, value] : s.items()) {
      if (!kKnown.count(key) && !kAnnotations.count(key)) return Unsupported(where, key);
    }
    auto at = [&](const std::string& k) { return where.empty() ? k : where + "." + k; };
    if (auto it = s.find("$ref"); it != s.end()) {
      if (s.size() > 1 && !(s.size() == 2 && (s.contains("description") || s.contains("title")))) {
        return InvalidArgument("JSON schema: '" + at("$ref") + "' must stand alone");
      }
      return Ref(*it, at("$ref"), depth);
    }
    if (auto it = s.find("const"); it != s.end()) return GbnfLiteral(it->dump());
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) {
        return InvalidArgument("JSON schema: '" + at("enum") + "' must be a non-empty array");
      }
      std::string alts;
      for (const auto& v : *it) alts += (alts.empty() ? "" : " | ") + GbnfLiteral(v.dump());
      return NewRule(alts);
    }
    if (auto it = s.find("anyOf"); it != s.end()) {
      if (!it->is_array() || it->empty()) {
        return InvalidArgument("JSON schema: '" + at("anyOf") + "' must be a non-empty array");
      }
      std::string alts;
      for (size_t i = 0; i < it->size(); ++i) {
        PC_ASSIGN_OR_RETURN(std::string r,
                            Rule((*it)[i], at("anyOf[" + std::to_string(i) + "]"), depth + 1));
        alts += (alts.empty() ? "" : " | ") + r;
      }
      return NewRule(alts);
    }
    auto type = s.find("type");
    if (type == s.end()) {
      if (s.contains("properties")) return Object(s, where, depth);
      if (s.contains("items")) return Array(s, where, depth);
      return std::string("value");  // {}: any JSON value
    }
    if (type->is_array()) {
      std::string alts;
      for (const auto& t : *type) {
        if (!t.is_string()) return InvalidArgument("JSON schema: '" + at("type") + "' is invalid");
        ojson one = s;
        one["type"] = t;
        PC_ASSIGN_OR_RETURN(std::string r, Rule(one, where, depth + 1));
        alts += (alts.empty() ? "" : " | ") + r;
      }
      if (alts.empty()) return InvalidArgument("JSON schema: '" + at("type") + "' is empty");
      return NewRule(alts);
    }
    if (!type->is_string()) return InvalidArgument("JSON schema: '" + at("type") + "' is invalid");
    const std::string t = type->get<std::string>();
    if (t == "object") return Object(s, where, depth);
    if (t == "array") return Array(s, where, depth);
    if (t == "string") {
      PC_ASSIGN_OR_RETURN(int min, Bound(s, "minLength", where, 0));
      PC_ASSIGN_OR_RETURN(int max, Bound(s, "maxLength", where, -1));
      if (min == 0 && max < 0) return std::string("string");
      if (max >= 0 && max < min) return InvalidArgument("JSON schema: maxLength < minLength");
      return NewRule("\"\\\"\" " + Repeat("char", min, max) + " \"\\\"\"");
    }
    if (t == "number" || t == "integer" || t == "boolean" || t == "null") return t;
    return InvalidArgument("JSON schema: '" + at("type") + "' is '" + t + "', not a JSON type");
  }

  Result<std::string> Ref(const ojson& ref, const std::string& where, int depth) {
    if (!ref.is_string()) return InvalidArgument("JSON schema: '" + where + "' must be a string");
    const std::string r = ref.get<std::string>();
    std::string name;
    const ojson* defs = nullptr;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (r.compare(0, p.size(), p) == 0) {
        name = r.substr(p.size());
        auto it = root_.find(p == "#/$defs/" ? "$defs" : "definitions");
        if (it != root_.end() && it->is_object()) defs = &*it;
      }
    }
    if (r == "#") {
      name = "#";
    } else if (defs == nullptr || !defs->contains(name)) {
      return InvalidArgument("JSON schema: '" + where + "' is '" + r +
                             "': only local references to $defs or definitions are supported");
    }
    auto done = refs_.find(r);
    if (done != refs_.end()) return done->second;
    // Named before it is built, so that recursive references find it.
    const std::string rule = prefix_ + std::to_string(rules_.size());
    rules_.push_back("");
    const size_t slot = rules_.size() - 1;
    refs_[r] = rule;
    PC_ASSIGN_OR_RETURN(std::string body, Rule(r == "#" ? root_ : (*defs)[name], where, depth + 1));
    rules_[slot] = rule + " ::= " + body;
    return rule;
  }

  Result<std::string> Object(const ojson& s, const std::string& where, int depth) {
    auto at = [&](const std::string& k) { return where.empty() ? k : where + "." + k; };
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      if (!(it->is_boolean() && !it->get<bool>())) {
        return InvalidArgument("JSON schema: '" + at("additionalProperties") +
                               "' must be false (only the listed properties are generated)");
      }
    }
    std::set<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) return InvalidArgument("JSON schema: '" + at("required") + "' invalid");
      for (const auto& r : *it) {
        if (!r.is_string()) return InvalidArgument("JSON schema: '" + at("required") + "' invalid");
        required.insert(r.get<std::string>());
      }
    }
    auto props = s.find("properties");
    if (props == s.end() || props->empty()) {
      if (!required.empty()) return InvalidArgument("JSON schema: required without properties");
      return NewRule("\"{\" ws \"}\"");
    }
    if (!props->is_object()) return InvalidArgument("JSON schema: '" + at("properties") + "'");
    std::vector<std::string> kv;
    std::vector<bool> req;
    for (const auto& [name, sub] : props->items()) {
      PC_ASSIGN_OR_RETURN(std::string v, Rule(sub, at("properties." + name), depth + 1));
      kv.push_back(GbnfLiteral(ojson(name).dump()) + " ws \":\" ws " + v + " ws");
      req.push_back(required.count(name) > 0);
    }
    for (const std::string& r : required) {
      if (!props->contains(r)) {
        return InvalidArgument("JSON schema: '" + at("required") + "' names '" + r +
                               "', which is not in properties");
      }
    }
    // rest[i]: properties i.. after at least one; first[i]: properties i.. before any.
    const size_t n = kv.size();
    std::vector<std::string> rest(n + 1), first(n + 1);
    rest[n] = first[n] = "\"\"";
    for (size_t i = n; i-- > 0;) {
      const std::string with = "\",\" ws " + kv[i] + " " + rest[i + 1];
      rest[i] =
          NewRule(req[i] ? with : "(" + std::string("\",\" ws ") + kv[i] + ")? " + rest[i + 1]);
      const std::string start = kv[i] + " " + rest[i + 1];
      first[i] = NewRule(req[i] ? start : start + " | " + first[i + 1]);
    }
    return NewRule("\"{\" ws " + first[0] + " \"}\"");
  }

  Result<std::string> Array(const ojson& s, const std::string& where, int depth) {
    auto at = [&](const std::string& k) { return where.empty() ? k : where + "." + k; };
    std::string item = "value";
    if (auto it = s.find("items"); it != s.end()) {
      PC_ASSIGN_OR_RETURN(item, Rule(*it, at("items"), depth + 1));
    }
    PC_ASSIGN_OR_RETURN(int min, Bound(s, "minItems", where, 0));
    PC_ASSIGN_OR_RETURN(int max, Bound(s, "maxItems", where, -1));
    if (max >= 0 && max < min) return InvalidArgument("JSON schema: maxItems < minItems");
    if (max == 0) return NewRule("\"[\" ws \"]\"");
    const std::string more =
        Repeat("\",\" ws " + item + " ws", std::max(0, min - 1), max < 0 ? -1 : max - 1);
    const std::string list = item + " ws " + more;
    return NewRule("\"[\" ws " + (min > 0 ? list : "(" + list + ")?") + " \"]\"");
  }

  const ojson& root_;
  const std::string prefix_;  // of the rules' names
  std::vector<std::string> rules_;
  std::map<std::string, std::string> refs_;
};

}  // namespace

Result<std::string> JsonSchemaRules(std::string_view schema, const std::string& prefix,
                                    std::string* top) {
  // Before parsing: nothing below (copies, dump(), the converter) may recurse deeper than this.
  PC_RETURN_IF_ERROR(CheckJsonNesting(schema, "JSON schema: the schema"));
  ojson root;
  try {
    root = ojson::parse(schema.begin(), schema.end());
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("JSON schema: not valid JSON: ") + e.what());
  }
  Converter c(root, prefix);
  std::string rules;
  PC_ASSIGN_OR_RETURN(*top, c.Run(&rules));
  return rules;
}

Result<std::string> JsonSchemaToGbnf(std::string_view schema) {
  std::string top;
  PC_ASSIGN_OR_RETURN(std::string rules, JsonSchemaRules(schema, "s", &top));
  return "root ::= " + top + "\n" + kCommonRules + rules;
}

std::string JsonSharedGbnf() { return kCommonRules; }

std::string JsonObjectGbnf() { return std::string("root ::= object\n") + kCommonRules; }

}  // namespace promptcache
