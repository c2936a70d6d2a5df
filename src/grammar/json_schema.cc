// JSON Schema to GBNF (json_schema.h). A schema is compiled as a conjunction: the schemas that
// must all hold at one place (a schema, its allOf members, what its $ref names, and the branch
// of an anyOf being taken), so that keywords side by side (an anyOf beside a type, a $ref beside
// a maximum) combine exactly. anyOf and oneOf become alternatives, each a conjunction with one
// branch; then each type allowed by every member is generated with the keywords of all members
// that apply to it (json_schema_parts.cc). An expression "" means that no value is valid.
#include "grammar/json_schema.h"

#include <algorithm>
#include <optional>
#include <set>

#include "grammar/grammar.h"
#include "grammar/json_depth.h"
#include "grammar/json_schema_internal.h"

namespace promptcache {
namespace grammar_internal {
namespace {

// Shared rules. Whitespace and digits are bounded so that any generation can end. A character
// is one code point: a \u escape is not a lone surrogate, and a surrogate pair is one character
// (minLength/maxLength count code points).
constexpr const char* kCommonRules = R"(ws ::= | " " | "\n" [ ]{0,8}
hex ::= [0-9a-fA-F]
char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-CeEfF] hex{3} | [dD] [0-7] hex{2} | [dD] [89abAB] hex{2} "\\u" [dD] [c-fC-F] hex{2}))
string ::= "\"" char* "\""
integer ::= "-"? ("0" | [1-9] [0-9]{0,15})
number ::= integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
)";

}  // namespace

const std::set<std::string>& SchemaAnnotations() {
  static const std::set<std::string> s = {
      "title",  "description", "default",  "examples",  "$schema",       "$id",    "$comment",
      "strict", "deprecated",  "readOnly", "writeOnly", "discriminator", "$anchor"};
  return s;
}

const std::set<std::string>& SchemaKeywords() {
  static const std::set<std::string> s = {"type",
                                          "enum",
                                          "const",
                                          "anyOf",
                                          "oneOf",
                                          "allOf",
                                          "$ref",
                                          "$defs",
                                          "definitions",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "propertyNames",
                                          "items",
                                          "prefixItems",
                                          "additionalItems",
                                          "minItems",
                                          "maxItems",
                                          "uniqueItems",
                                          "minLength",
                                          "maxLength",
                                          "pattern",
                                          "format",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum"};
  return s;
}

Status Converter::Unsupported(const std::string& where, const std::string& what) const {
  return InvalidArgument("JSON schema: '" + At(where, what) + "' is not supported");
}

Status Converter::Invalid(const std::string& where, const std::string& what,
                          const std::string& why) const {
  return InvalidArgument("JSON schema: '" + At(where, what) + "' " + why);
}

std::string Converter::NewRule(const std::string& body) {
  const std::string name = Reserve();
  Define(name, body);
  return name;
}

std::string Converter::Reserve() {
  const std::string name = prefix_ + std::to_string(rules_.size());
  index_[name] = rules_.size();
  rules_.push_back({name, ""});
  return name;
}

void Converter::Define(const std::string& name, std::string body) {
  rules_[index_.at(name)].second = std::move(body);
}

Result<std::string> Converter::Run(std::string* rules) {
  PC_ASSIGN_OR_RETURN(std::string top, Rule({{&root_, ""}}, 0));
  if (top.empty()) return InvalidArgument("JSON schema: no value is valid against the schema");
  for (const auto& [name, body] : rules_) *rules += name + " ::= " + body + "\n";
  return top;
}

Status Converter::CheckKeys(const Part& p) const {
  for (const auto& [key, value] : p.s->items()) {
    if (SchemaAnnotations().count(key)) continue;
    if (!SchemaKeywords().count(key)) return Unsupported(p.where, key);
    if (key == "uniqueItems" && !(value.is_boolean() && !value.get<bool>())) {
      return Unsupported(p.where, "uniqueItems");
    }
  }
  return Status::Ok();
}

// Decodes a JSON pointer token: percent-escapes (references written as URI fragments), then
// ~1 and ~0.
static std::string PointerToken(const std::string& t) {
  std::string pct;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '%' && i + 2 < t.size() + 0 &&
        std::isxdigit(static_cast<unsigned char>(t[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(t[i + 2]))) {
      pct += static_cast<char>(std::stoi(t.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      pct += t[i];
    }
  }
  std::string out;
  for (size_t i = 0; i < pct.size(); ++i) {
    if (pct[i] == '~' && i + 1 < pct.size() && (pct[i + 1] == '0' || pct[i + 1] == '1')) {
      out += pct[++i] == '0' ? '~' : '/';
    } else {
      out += pct[i];
    }
  }
  return out;
}

Result<const ojson*> Converter::Resolve(const ojson& ref, const std::string& where) const {
  if (!ref.is_string()) return Invalid(where, "$ref", "must be a string");
  const std::string r = ref.get<std::string>();
  if (r.empty() || r[0] != '#') {
    return Invalid(where, "$ref",
                   "is '" + r +
                       "': only local references (#, #/$defs/..., a JSON pointer) are "
                       "supported");
  }
  const ojson* at = &root_;
  size_t pos = 1;
  while (pos < r.size()) {
    if (r[pos] != '/') return Invalid(where, "$ref", "is '" + r + "', not a JSON pointer");
    const size_t next = std::min(r.find('/', pos + 1), r.size());
    const std::string token = PointerToken(r.substr(pos + 1, next - pos - 1));
    const ojson* child = nullptr;
    if (at->is_object()) {
      auto it = at->find(token);
      if (it != at->end()) child = &*it;
    } else if (at->is_array() && !token.empty() &&
               token.find_first_not_of("0123456789") == std::string::npos && token.size() < 9) {
      const size_t i = std::stoul(token);
      if (i < at->size()) child = &(*at)[i];
    }
    if (child == nullptr) return Invalid(where, "$ref", "is '" + r + "', which names nothing");
    at = child;
    pos = next;
  }
  return at;
}

bool Converter::OnlyRef(const ojson& s) {
  if (!s.is_object() || !s.contains("$ref")) return false;
  for (const auto& [key, value] : s.items()) {
    if (key != "$ref" && !SchemaAnnotations().count(key) && key != "$defs" &&
        key != "definitions") {
      return false;
    }
  }
  return true;
}

Result<std::string> Converter::Rule(Conj conj, int depth) {
  const std::string& where0 = conj.empty() ? std::string() : conj[0].where;
  if (depth > kMaxSchemaDepth) {
    const std::string w = where0.size() <= 120
                              ? where0
                              : where0.substr(0, 50) + "..." + where0.substr(where0.size() - 50);
    return InvalidArgument("JSON schema: '" + w + "' is nested more than " +
                           std::to_string(kMaxSchemaDepth) + " schemas deep");
  }
  // A lone reference is a rule of its own, named before it is built (recursion finds it).
  if (conj.size() == 1 && OnlyRef(*conj[0].s)) {
    PC_RETURN_IF_ERROR(CheckKeys(conj[0]));
    const ojson& ref = (*conj[0].s)["$ref"];
    PC_ASSIGN_OR_RETURN(const ojson* target, Resolve(ref, conj[0].where));
    const std::string key = ref.get<std::string>();
    if (auto done = refs_.find(key); done != refs_.end()) return done->second;
    const std::string rule = Reserve();
    refs_[key] = rule;
    PC_ASSIGN_OR_RETURN(std::string body, Rule({{target, At(conj[0].where, "$ref")}}, depth + 1));
    if (body.empty()) {
      // Nothing valid: recursion into this reference cannot complete either.
      Define(rule, "[^\\x00-\\U0010FFFF]");
      refs_[key] = "";
      return std::string();
    }
    Define(rule, body);
    return rule;
  }
  // Flatten: booleans, allOf members and references beside other keywords join the conjunction.
  Conj flat;
  int inlined = 0;
  for (size_t i = 0; i < conj.size(); ++i) {
    Part p = conj[i];
    if (p.s->is_boolean()) {
      if (!p.s->get<bool>()) return std::string();
      continue;
    }
    if (!p.s->is_object())
      return InvalidArgument("JSON schema: '" + p.where + "' must be an object");
    PC_RETURN_IF_ERROR(CheckKeys(p));
    if (auto it = p.s->find("allOf"); it != p.s->end()) {
      if (!it->is_array() || it->empty())
        return Invalid(p.where, "allOf", "must be a non-empty array");
      for (size_t k = 0; k < it->size(); ++k) {
        conj.push_back({&(*it)[k], At(p.where, "allOf[" + std::to_string(k) + "]")});
      }
    }
    if (auto it = p.s->find("$ref"); it != p.s->end()) {
      if (++inlined > kMaxSchemaDepth) {
        return Invalid(p.where, "$ref", "refers to itself beside other keywords");
      }
      PC_ASSIGN_OR_RETURN(const ojson* target, Resolve(*it, p.where));
      conj.push_back({target, At(p.where, "$ref")});
    }
    flat.push_back(p);
  }
  // anyOf / oneOf: one alternative per branch.
  for (size_t i = 0; i < flat.size(); ++i) {
    for (const char* key : {"anyOf", "oneOf"}) {
      if (flat[i].done_alternatives) continue;
      auto it = flat[i].s->find(key);
      if (it == flat[i].s->end()) continue;
      if (!it->is_array() || it->empty()) {
        return Invalid(flat[i].where, key, "must be a non-empty array");
      }
      if (std::string(key) == "oneOf")
        PC_RETURN_IF_ERROR(CheckDisjoint(*it, At(flat[i].where, key)));
      std::string alts;
      for (size_t k = 0; k < it->size(); ++k) {
        Conj branch = flat;
        branch[i].done_alternatives = true;
        branch.push_back(
            {&(*it)[k], At(flat[i].where, std::string(key) + "[" + std::to_string(k) + "]")});
        PC_ASSIGN_OR_RETURN(std::string r, Rule(std::move(branch), depth + 1));
        if (!r.empty()) alts += (alts.empty() ? "" : " | ") + r;
      }
      return alts.empty() ? std::string() : NewRule(alts);
    }
  }
  return Body(flat, depth);
}

namespace {

// The JSON types a schema allows, where it says (its type, or its literals' types); integer
// values count as both integer and number.
std::optional<std::set<std::string>> TypesOf(const ojson& s) {
  std::set<std::string> out;
  auto add = [&](const std::string& t) {
    out.insert(t);
    if (t == "integer") out.insert("number");
    if (t == "number") out.insert("integer");  // a number type allows integers too
  };
  if (auto it = s.find("type"); it != s.end()) {
    for (const ojson& t : it->is_array() ? *it : ojson::array({*it})) {
      if (t.is_string()) add(t.get<std::string>());
    }
    return out;
  }
  std::vector<ojson> values;
  if (auto it = s.find("const"); it != s.end()) values.push_back(*it);
  if (auto it = s.find("enum"); it != s.end() && it->is_array()) {
    values.insert(values.end(), it->begin(), it->end());
  }
  if (values.empty()) return std::nullopt;
  for (const ojson& v : values) {
    add(v.is_null()      ? "null"
        : v.is_boolean() ? "boolean"
        : v.is_string()  ? "string"
        : v.is_array()   ? "array"
        : v.is_object()  ? "object"
                         : "number");
  }
  return out;
}

std::optional<std::vector<ojson>> LiteralsOf(const ojson& s) {
  if (auto it = s.find("const"); it != s.end()) return std::vector<ojson>{*it};
  if (auto it = s.find("enum"); it != s.end() && it->is_array()) {
    return std::vector<ojson>(it->begin(), it->end());
  }
  return std::nullopt;
}

}  // namespace

// Conservative: true only where no value can satisfy both (different types, different literals,
// or a property both require whose schemas are disjoint: a discriminated union).
bool Converter::Disjoint(const ojson* a, const ojson* b, int depth) const {
  for (const ojson** s : {&a, &b}) {
    for (int hops = 0; OnlyRef(**s) && hops < 8; ++hops) {
      Result<const ojson*> t = Resolve((**s)["$ref"], "");
      if (!t.ok()) return false;
      *s = *t;
    }
    if ((*s)->is_boolean()) return !(*s)->get<bool>();
    if (!(*s)->is_object()) return false;
  }
  const auto ta = TypesOf(*a), tb = TypesOf(*b);
  if (ta && tb) {
    bool overlap = false;
    for (const std::string& t : *ta) overlap = overlap || tb->count(t);
    if (!overlap) return true;
  }
  const auto la = LiteralsOf(*a), lb = LiteralsOf(*b);
  if (la && lb) {
    bool overlap = false;
    for (const ojson& v : *la)
      overlap = overlap || std::find(lb->begin(), lb->end(), v) != lb->end();
    if (!overlap) return true;
  }
  if (depth > 8) return false;
  auto pa = a->find("properties"), pb = b->find("properties");
  auto ra = a->find("required"), rb = b->find("required");
  if (pa == a->end() || pb == b->end() || ra == a->end() || rb == b->end() || !pa->is_object() ||
      !pb->is_object() || !ra->is_array() || !rb->is_array()) {
    return false;
  }
  for (const auto& [name, sa] : pa->items()) {
    if (!pb->contains(name)) continue;
    const bool both = std::find(ra->begin(), ra->end(), name) != ra->end() &&
                      std::find(rb->begin(), rb->end(), name) != rb->end();
    if (both && Disjoint(&sa, &(*pb)[name], depth + 1)) return true;
  }
  return false;
}

Status Converter::CheckDisjoint(const ojson& branches, const std::string& where) const {
  for (size_t i = 0; i < branches.size(); ++i) {
    for (size_t j = i + 1; j < branches.size(); ++j) {
      if (!Disjoint(&branches[i], &branches[j], 0)) {
        return InvalidArgument("JSON schema: '" + where + "' branches " + std::to_string(i) +
                               " and " + std::to_string(j) +
                               " may both match: oneOf is supported where its branches cannot "
                               "overlap (different types, literals, or a required property "
                               "with different values); use anyOf");
      }
    }
  }
  return Status::Ok();
}

Result<std::string> Converter::Body(const Conj& conj, int depth) {
  // The types every member allows (none given: all).
  std::set<std::string> types = {"object",  "array",   "string", "number",
                                 "integer", "boolean", "null"};
  bool typed = false;
  for (const Part& p : conj) {
    auto it = p.s->find("type");
    if (it == p.s->end()) continue;
    std::set<std::string> mine;
    static const std::set<std::string> kTypes = {"object",  "array",   "string", "number",
                                                 "integer", "boolean", "null"};
    for (const ojson& t : it->is_array() ? *it : ojson::array({*it})) {
      if (!t.is_string()) return Invalid(p.where, "type", "is invalid");
      const std::string name = t.get<std::string>();
      if (!kTypes.count(name))
        return Invalid(p.where, "type", "is '" + name + "', not a JSON type");
      mine.insert(name);
      if (name == "number") mine.insert("integer");
    }
    if (it->is_array() && it->empty()) return Invalid(p.where, "type", "is empty");
    std::set<std::string> both;
    for (const std::string& t : types) {
      if (mine.count(t)) both.insert(t);
    }
    types = both;
    typed = true;
  }
  if (types.count("number")) types.erase("integer");
  if (HasLiterals(conj)) return Literals(conj, types, typed, depth);
  if (!typed) {
    // No type: the types the keywords present constrain, or any value.
    std::set<std::string> inferred = InferTypes(conj);
    if (inferred.empty()) return std::string("value");
    types = inferred;
  }
  std::string alts;
  for (const char* t : {"object", "array", "string", "integer", "number", "boolean", "null"}) {
    if (!types.count(t)) continue;
    std::string r;
    const std::string type = t;
    if (type == "object") {
      PC_ASSIGN_OR_RETURN(r, Object(conj, depth));
    } else if (type == "array") {
      PC_ASSIGN_OR_RETURN(r, Array(conj, depth));
    } else if (type == "string") {
      PC_ASSIGN_OR_RETURN(r, String(conj));
    } else if (type == "integer" || type == "number") {
      PC_ASSIGN_OR_RETURN(r, Number(conj, type == "integer"));
    } else {
      r = type;
    }
    if (!r.empty()) alts += (alts.empty() ? "" : " | ") + r;
  }
  if (alts.empty()) return std::string();
  return alts.find(' ') == std::string::npos ? alts : NewRule(alts);
}

}  // namespace grammar_internal

Result<std::string> JsonSchemaRules(std::string_view schema, const std::string& prefix,
                                    std::string* top) {
  // Before parsing: nothing below (copies, dump(), the converter) may recurse deeper than this.
  PC_RETURN_IF_ERROR(CheckJsonNesting(schema, "JSON schema: the schema"));
  grammar_internal::ojson root;
  try {
    root = grammar_internal::ojson::parse(schema.begin(), schema.end());
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("JSON schema: not valid JSON: ") + e.what());
  }
  grammar_internal::Converter c(root, prefix);
  std::string rules;
  PC_ASSIGN_OR_RETURN(*top, c.Run(&rules));
  return rules;
}

Result<std::string> JsonSchemaToGbnf(std::string_view schema) {
  std::string top;
  PC_ASSIGN_OR_RETURN(std::string rules, JsonSchemaRules(schema, "s", &top));
  return "root ::= " + top + "\n" + grammar_internal::kCommonRules + rules;
}

std::string JsonSharedGbnf() { return grammar_internal::kCommonRules; }

std::string JsonObjectGbnf() {
  return std::string("root ::= object\n") + grammar_internal::kCommonRules;
}

}  // namespace promptcache
