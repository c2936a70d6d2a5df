// Prompt parsing and planning: which modules a prompt includes (with union defaults), checks of
// required/requires/excludes and parameters, and the tokens to compute at which positions.
#include <algorithm>
#include <cstdlib>
#include <unordered_map>

#include "core/enum_names.h"
#include "pml/pml.h"
#include "pml/pml_internal.h"

namespace promptcache {
namespace {

using pml_internal::FormatPos;
using pml_internal::IsAllSpace;
using pml_internal::IsRoleTag;
using pml_internal::kMaxDepth;
using pml_internal::NormalizeText;
using pml_internal::Quote;
using pml_internal::XmlSource;

class PromptParser {
 public:
  explicit PromptParser(const XmlSource& xml) : xml_(xml) {}
  Result<PmlPrompt> Parse();

 private:
  Status Error(const pugi::xml_node& node, const std::string& what) const {
    return InvalidArgument(xml_.Where(xml_.PosOf(node)) + ": prompt: " + what);
  }
  Status CheckNoDuplicateAttributes(const pugi::xml_node& node) const;
  Result<PmlModuleRef> ParseRef(const pugi::xml_node& node, int depth) const;
  Result<std::string> RoleText(const pugi::xml_node& node) const;

  const XmlSource& xml_;
};

Status PromptParser::CheckNoDuplicateAttributes(const pugi::xml_node& node) const {
  for (pugi::xml_attribute a : node.attributes()) {
    for (pugi::xml_attribute b = a.next_attribute(); b; b = b.next_attribute()) {
      if (std::string_view(a.name()) == b.name()) {
        return Error(
            node, "<" + std::string(node.name()) + ">: attribute '" + a.name() + "' given twice");
      }
    }
  }
  return Status::Ok();
}

// Whether an element has text of its own (not only whitespace between children).
bool HoldsText(const pugi::xml_node& node) {
  for (pugi::xml_node child : node.children()) {
    if ((child.type() == pugi::node_pcdata || child.type() == pugi::node_cdata) &&
        !IsAllSpace(child.value())) {
      return true;
    }
  }
  return false;
}

Result<PmlModuleRef> PromptParser::ParseRef(const pugi::xml_node& node, int depth) const {
  if (depth > kMaxDepth) {
    return Error(node, "elements nested deeper than " + std::to_string(kMaxDepth) + " levels");
  }
  PC_RETURN_IF_ERROR(CheckNoDuplicateAttributes(node));
  PmlModuleRef ref;
  ref.name = node.name();
  ref.pos = xml_.PosOf(node);
  for (pugi::xml_attribute a : node.attributes()) ref.arguments.emplace_back(a.name(), a.value());
  for (pugi::xml_node child : node.children()) {
    if (child.type() == pugi::node_pcdata || child.type() == pugi::node_cdata) {
      if (!IsAllSpace(child.value())) {
        return Error(child, "text " + Quote(NormalizeText(child.value())) +
                                " inside module reference <" + ref.name +
                                "> (parameters are attributes; new text goes after the module "
                                "references)");
      }
    } else if (child.type() == pugi::node_element) {
      if (IsRoleTag(child.name())) {
        return Error(child, "<" + std::string(child.name()) + "> inside module reference <" +
                                ref.name + "> (chat turns go after the module references)");
      }
      PC_ASSIGN_OR_RETURN(PmlModuleRef nested, ParseRef(child, depth + 1));
      ref.children.push_back(std::move(nested));
    }
  }
  return ref;
}

Result<std::string> PromptParser::RoleText(const pugi::xml_node& node) const {
  if (node.first_attribute()) {
    return Error(node, "<" + std::string(node.name()) + ">: unknown attribute '" +
                           node.first_attribute().name() + "' (role tags take none)");
  }
  std::string text;
  for (pugi::xml_node child : node.children()) {
    if (child.type() == pugi::node_pcdata) {
      text += NormalizeText(child.value());
    } else if (child.type() == pugi::node_cdata) {
      text += child.value();
    } else if (child.type() == pugi::node_element) {
      return Error(child, "<" + std::string(child.name()) + "> inside <" + node.name() +
                              "> (a chat turn holds text only; module references come first)");
    }
  }
  return text;
}

Result<PmlPrompt> PromptParser::Parse() {
  const pugi::xml_node root = xml_.root();
  if (std::string_view(root.name()) != "prompt") {
    return Error(root, "the root element is <" + std::string(root.name()) +
                           ">, expected <prompt schema=\"...\">");
  }
  PC_RETURN_IF_ERROR(CheckNoDuplicateAttributes(root));
  PmlPrompt prompt;
  for (pugi::xml_attribute a : root.attributes()) {
    const std::string_view name = a.name();
    if (name == "positions") {
      Result<PmlPositions> p = ParsePmlPositions(a.value());
      if (!p.ok()) return Error(root, "<prompt>: " + p.status().message());
      prompt.positions = *p;
    } else if (name == "recompute") {
      Result<double> r = ParseRecompute(a.value());
      if (!r.ok()) return Error(root, "<prompt>: " + r.status().message());
      prompt.recompute = *r;
    } else if (name != "schema") {
      return Error(root, "<prompt>: unknown attribute '" + std::string(name) +
                             "' (<prompt> takes schema, positions and recompute)");
    }
  }
  prompt.file = xml_.file();
  prompt.pos = xml_.PosOf(root);
  prompt.schema = root.attribute("schema").value();
  if (prompt.schema.empty()) return Error(root, "<prompt> without a schema attribute");
  bool text_started = false;
  for (pugi::xml_node child : root.children()) {
    switch (child.type()) {
      case pugi::node_pcdata:
      case pugi::node_cdata: {
        // Whitespace-only text before the new text (around module references) is layout.
        if (!text_started && IsAllSpace(child.value())) break;
        std::string text = child.type() == pugi::node_cdata ? std::string(child.value())
                                                            : NormalizeText(child.value());
        if (text.empty()) break;
        text_started = true;
        prompt.text.push_back({"", std::move(text), xml_.PosOf(child)});
        break;
      }
      case pugi::node_element: {
        const std::string name = child.name();
        if (!IsRoleTag(name) && HoldsText(child)) {
          // Module references never hold text: this is a misspelt role or a misused module.
          return Error(child, "<" + name + "> holds text: an unknown role tag (chat turns are " +
                                  "<system>, <user> and <assistant>), or a module reference " +
                                  "with text (parameters are attributes; new text goes after " +
                                  "the module references)");
        }
        if (IsRoleTag(name)) {
          PC_ASSIGN_OR_RETURN(std::string text, RoleText(child));
          text_started = true;
          prompt.text.push_back({name, std::move(text), xml_.PosOf(child)});
        } else {
          if (text_started) {
            return Error(child, "module reference <" + name +
                                    "> after the new text (module references come first; "
                                    "their order does not matter)");
          }
          PC_ASSIGN_OR_RETURN(PmlModuleRef ref, ParseRef(child, 1));
          prompt.modules.push_back(std::move(ref));
        }
        break;
      }
      default:
        break;
    }
  }
  return prompt;
}

// Checks a prompt against its schema and builds the plan.
class Planner {
 public:
  Planner(const SchemaLayout& layout, const PmlPrompt& prompt, const PmlTextEncoder& encoder)
      : s_(layout),
        p_(prompt),
        enc_(encoder),
        ref_of_(layout.modules.size(), nullptr),
        included_(layout.modules.size(), false),
        union_pick_(layout.unions.size(), -1) {
    for (size_t i = 0; i < layout.modules.size(); ++i) {
      index_.emplace(layout.modules[i].name, static_cast<int>(i));
    }
  }

  Result<PmlPlan> Plan();

 private:
  Status ErrorAt(const PmlSourcePos& pos, const std::string& what,
                 StatusCode code = StatusCode::kInvalidArgument) const {
    return Status(code, FormatPos(p_.file, pos) + ": prompt for schema '" + s_.name + "': " + what);
  }
  std::string SchemaWhere(const PmlSourcePos& pos) const { return FormatPos(s_.file, pos); }
  std::string ModuleName(int m) const { return "'" + s_.modules[m].name + "'"; }
  // Where to report a problem with module m: its reference, or the prompt if included by default.
  PmlSourcePos PosOf(int m) const { return ref_of_[m] ? ref_of_[m]->pos : p_.pos; }
  bool ContextIncluded(int parent) const { return parent == -1 || included_[parent]; }

  Status Resolve(const PmlModuleRef& ref, int parent);
  void ApplyUnionDefaults();
  Status CheckConstraints() const;
  Status FillArguments(PmlPlan* plan) const;

  const SchemaLayout& s_;
  const PmlPrompt& p_;
  const PmlTextEncoder& enc_;
  std::unordered_map<std::string, int> index_;
  std::vector<const PmlModuleRef*> ref_of_;
  std::vector<bool> included_;
  std::vector<int> union_pick_;
  std::vector<int> defaulted_;
};

Status Planner::Resolve(const PmlModuleRef& ref, int parent) {
  auto it = index_.find(ref.name);
  if (it == index_.end()) {
    return ErrorAt(ref.pos, "unknown module " + Quote(ref.name), StatusCode::kNotFound);
  }
  const int m = it->second;
  const PmlModule& mod = s_.modules[m];
  if (mod.parent != parent) {
    if (parent == -1) {
      return ErrorAt(ref.pos, "module '" + ref.name + "' is nested in module " +
                                  ModuleName(mod.parent) + "; reference it inside <" +
                                  s_.modules[mod.parent].name + ">");
    }
    return ErrorAt(
        ref.pos, "module '" + ref.name + "' is not nested in module " + ModuleName(parent) +
                     (mod.parent == -1 ? "; it is a top-level module"
                                       : "; it belongs in <" + s_.modules[mod.parent].name + ">"));
  }
  if (ref_of_[m] != nullptr) {
    return ErrorAt(ref.pos, "module '" + ref.name + "' is referenced twice (first at " +
                                FormatPos(p_.file, ref_of_[m]->pos) + ")");
  }
  if (mod.union_index >= 0) {
    const int other = union_pick_[mod.union_index];
    if (other >= 0) {
      return ErrorAt(ref.pos, "modules " + ModuleName(other) + " and '" + ref.name +
                                  "' are members of one union (" +
                                  SchemaWhere(s_.unions[mod.union_index].pos) +
                                  "); pick at most one");
    }
    union_pick_[mod.union_index] = m;
  }
  ref_of_[m] = &ref;
  included_[m] = true;
  for (const PmlModuleRef& child : ref.children) PC_RETURN_IF_ERROR(Resolve(child, m));
  return Status::Ok();
}

// Unions are in document order, so an outer union's default is settled before the unions nested
// in its members are looked at.
void Planner::ApplyUnionDefaults() {
  for (size_t u = 0; u < s_.unions.size(); ++u) {
    const PmlUnion& un = s_.unions[u];
    if (union_pick_[u] >= 0 || un.default_member < 0 || !ContextIncluded(un.parent)) continue;
    union_pick_[u] = un.default_member;
    included_[un.default_member] = true;
    defaulted_.push_back(un.default_member);
  }
}

Status Planner::CheckConstraints() const {
  for (size_t i = 0; i < s_.modules.size(); ++i) {
    const PmlModule& m = s_.modules[i];
    if (m.required && !included_[i] && ContextIncluded(m.parent)) {
      return ErrorAt(p_.pos,
                     "missing required module '" + m.name + "' (" + SchemaWhere(m.pos) + ")" +
                         (m.parent >= 0 ? ", required inside " + ModuleName(m.parent) : ""));
    }
  }
  for (size_t i = 0; i < s_.modules.size(); ++i) {
    if (!included_[i]) continue;
    const PmlModule& m = s_.modules[i];
    const std::string how = ref_of_[i] ? "" : " (included as its union's default)";
    for (int r : m.requires_modules) {
      if (!included_[r]) {
        return ErrorAt(PosOf(i), "module '" + m.name + "'" + how + " requires module " +
                                     ModuleName(r) + ", which the prompt does not include");
      }
    }
    for (int x : m.excludes_modules) {
      if (included_[x]) {
        return ErrorAt(PosOf(i), "module '" + m.name + "'" + how + " excludes module " +
                                     ModuleName(x) + ", which the prompt includes" +
                                     (ref_of_[x] ? "" : " as its union's default"));
      }
    }
  }
  return Status::Ok();
}

Status Planner::FillArguments(PmlPlan* plan) const {
  for (size_t i = 0; i < s_.modules.size(); ++i) {
    if (!included_[i]) continue;
    const PmlModule& m = s_.modules[i];
    std::vector<bool> given(m.parameters.size(), false);
    if (const PmlModuleRef* ref = ref_of_[i]) {
      for (const auto& argument : ref->arguments) {
        const std::string& name = argument.first;
        const std::string& value = argument.second;
        auto it = std::find_if(m.parameters.begin(), m.parameters.end(),
                               [&](const PmlParameter& p) { return p.name == name; });
        if (it == m.parameters.end()) {
          std::string names;
          for (const PmlParameter& p : m.parameters) names += (names.empty() ? "" : ", ") + p.name;
          return ErrorAt(ref->pos, "module '" + m.name + "' has no parameter '" + name + "' (" +
                                       (names.empty() ? "it has none" : "parameters: " + names) +
                                       ")");
        }
        const size_t k = static_cast<size_t>(it - m.parameters.begin());
        PmlArgument arg;
        arg.module = static_cast<int>(i);
        arg.parameter = static_cast<int>(k);
        arg.tokens.start = it->start;
        arg.tokens.tokens = enc_.Tokenize(MarkedText::User(value));
        if (static_cast<int64_t>(arg.tokens.tokens.size()) > it->length) {
          return ErrorAt(ref->pos,
                         "module '" + m.name + "': argument " + Quote(value) + " for parameter '" +
                             name + "' is " + std::to_string(arg.tokens.tokens.size()) +
                             " tokens, longer than its length " + std::to_string(it->length));
        }
        given[k] = true;
        plan->arguments.push_back(std::move(arg));
      }
    }
    for (size_t k = 0; k < m.parameters.size(); ++k) {
      if (given[k]) continue;
      const PmlParameter& p = m.parameters[k];
      if (!p.scaffold) {
        return ErrorAt(PosOf(i), "module '" + m.name + "'" +
                                     (ref_of_[i] ? "" : " (included as its union's default)") +
                                     ": no argument for parameter '" + p.name +
                                     "', which has no scaffold default");
      }
      PmlArgument arg;
      arg.module = static_cast<int>(i);
      arg.parameter = static_cast<int>(k);
      arg.tokens.start = p.start;
      arg.tokens.tokens = p.scaffold_tokens;
      arg.is_default = true;
      plan->arguments.push_back(std::move(arg));
    }
  }
  std::stable_sort(
      plan->arguments.begin(), plan->arguments.end(),
      [](const PmlArgument& a, const PmlArgument& b) { return a.tokens.start < b.tokens.start; });
  return Status::Ok();
}

Result<PmlPlan> Planner::Plan() {
  if (p_.schema != s_.name) {
    return Status(StatusCode::kNotFound, FormatPos(p_.file, p_.pos) + ": prompt: unknown schema " +
                                             Quote(p_.schema) + " (loaded: " + s_.name + ")");
  }
  for (const PmlModuleRef& ref : p_.modules) PC_RETURN_IF_ERROR(Resolve(ref, -1));
  ApplyUnionDefaults();
  PC_RETURN_IF_ERROR(CheckConstraints());
  PmlPlan plan;
  PC_RETURN_IF_ERROR(FillArguments(&plan));
  for (size_t j = 0; j < s_.always.size(); ++j) {
    plan.cached.push_back({kPmlAlways, static_cast<int>(j)});
  }
  for (size_t i = 0; i < s_.modules.size(); ++i) {
    if (!included_[i]) continue;
    plan.modules.push_back(static_cast<int>(i));
    const PmlModule& m = s_.modules[i];
    for (size_t j = 0; j < m.texts.size(); ++j) {
      (m.cached ? plan.cached : plan.computed)
          .push_back({static_cast<int>(i), static_cast<int>(j)});
    }
  }
  auto by_start = [&](const PmlTextRef& a, const PmlTextRef& b) {
    return s_.Piece(a).start < s_.Piece(b).start;
  };
  std::stable_sort(plan.cached.begin(), plan.cached.end(), by_start);
  std::stable_sort(plan.computed.begin(), plan.computed.end(), by_start);
  plan.defaulted = defaulted_;
  std::sort(plan.defaulted.begin(), plan.defaulted.end());

  const MarkedText text = RenderPromptText(p_, enc_);
  plan.new_text.start = s_.total_length;
  if (!text.empty()) plan.new_text.tokens = enc_.Tokenize(text);
  plan.end = plan.new_text.end();
  const int context = enc_.ContextLength();
  if (context > 0 && plan.end > context) {
    return ErrorAt(p_.pos,
                   "needs " + std::to_string(plan.end) + " positions (schema " +
                       std::to_string(s_.total_length) + " + new text " +
                       std::to_string(plan.new_text.tokens.size()) +
                       "), more than the model's context of " + std::to_string(context),
                   StatusCode::kOutOfRange);
  }
  return plan;
}

}  // namespace

constexpr EnumName<PmlPositions> kPmlPositionsNames[] = {{PmlPositions::kDefault, "default"},
                                                         {PmlPositions::kSchema, "schema"},
                                                         {PmlPositions::kContiguous, "contiguous"}};
static_assert(NamesEach(kPmlPositionsNames, PmlPositions::kDefault, PmlPositions::kContiguous));

std::string_view PmlPositionsName(PmlPositions positions) {
  return NameOf(kPmlPositionsNames, positions, "default");
}

Result<PmlPositions> ParsePmlPositions(std::string_view name) {
  if (name == "schema") return PmlPositions::kSchema;
  if (name == "contiguous") return PmlPositions::kContiguous;
  return InvalidArgument("positions \"" + std::string(name) +
                         "\" is neither \"schema\" nor \"contiguous\"");
}

Result<double> ParseRecompute(std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !(v >= 0 && v <= 1)) {
    return InvalidArgument("recompute \"" + s + "\" is not a share from 0 to 1");
  }
  return v;
}

MarkedText RenderPromptText(const PmlPrompt& prompt, const PmlTextEncoder& encoder) {
  MarkedText text;
  for (size_t i = 0; i < prompt.text.size(); ++i) {
    const PmlPromptText& t = prompt.text[i];
    if (t.role.empty()) {
      text.AppendUser(t.text);
      continue;
    }
    auto [before, after] = encoder.RoleWrap(t.role);
    const bool prefill = i + 1 == prompt.text.size() && t.role == "assistant";
    text.AppendTrusted(before);
    text.AppendUser(t.text);
    if (!prefill) text.AppendTrusted(after);
  }
  return text;
}

Result<PmlPrompt> ParsePrompt(std::string_view xml, const std::string& file) {
  PC_ASSIGN_OR_RETURN(auto source, XmlSource::Parse(xml, file));
  return PromptParser(*source).Parse();
}

Result<PmlPlan> PlanPrompt(const SchemaLayout& layout, const PmlPrompt& prompt,
                           const PmlTextEncoder& encoder) {
  return Planner(layout, prompt, encoder).Plan();
}

Result<const SchemaLayout*> FindPromptSchema(const PmlPrompt& prompt,
                                             const std::vector<const SchemaLayout*>& schemas) {
  std::string names;
  for (const SchemaLayout* s : schemas) {
    if (s->name == prompt.schema) return s;
    names += (names.empty() ? "" : ", ") + s->name;
  }
  return NotFound(FormatPos(prompt.file, prompt.pos) + ": prompt: unknown schema " +
                  Quote(prompt.schema) + " (loaded: " + (names.empty() ? "none" : names) + ")");
}

}  // namespace promptcache
