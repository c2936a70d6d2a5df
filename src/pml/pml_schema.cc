// Schema parsing: one depth-first walk over the XML that tokenizes text runs and assigns
// positions. The passes after the walk (requires/excludes, the context check, attention spans and
// content keys) are in pml_schema_layout.cc; the builder they share is in pml_schema_builder.h.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unordered_map>

#include "pml/pml.h"
#include "pml/pml_internal.h"
#include "pml/pml_schema_builder.h"

namespace promptcache {
namespace {

using pml_internal::IsAllSpace;
using pml_internal::IsRoleTag;
using pml_internal::IsValidName;
using pml_internal::kMaxDepth;
using pml_internal::NormalizeText;
using pml_internal::Quote;
using pml_internal::XmlSource;

constexpr int64_t kMaxLength = int64_t{1} << 24;         // largest length="N" accepted
constexpr int64_t kMaxPositions = int64_t{1} << 30;      // a schema is rejected beyond this
constexpr uintmax_t kMaxSrcBytes = uintmax_t{16} << 20;  // largest src file

std::string JoinNames(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::vector<std::string> SplitSpaces(std::string_view s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && pml_internal::IsXmlSpace(s[i])) ++i;
    size_t j = i;
    while (j < s.size() && !pml_internal::IsXmlSpace(s[j])) ++j;
    if (j > i) out.emplace_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

// Reads `src` relative to `base_dir`, refusing paths that leave it (by "..", an absolute path or
// a symlink). Messages carry no position; the caller adds it.
Result<std::string> ReadSrc(const std::string& base_dir, const std::string& src) {
  namespace fs = std::filesystem;
  if (src.empty()) return InvalidArgument("src is empty");
  if (src[0] == '/') {
    return InvalidArgument("src " + Quote(src) +
                           " is an absolute path; it must be relative to the schema's folder");
  }
  for (std::string_view rest = src; !rest.empty();) {
    const size_t slash = rest.find('/');
    if (rest.substr(0, slash) == "..") {
      return InvalidArgument("src " + Quote(src) + " leaves the schema's folder ('..')");
    }
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  std::error_code ec;
  const fs::path base = fs::canonical(base_dir.empty() ? fs::path(".") : fs::path(base_dir), ec);
  if (ec) return NotFound("cannot read src " + Quote(src) + ": schema folder: " + ec.message());
  const fs::path target = fs::canonical(base / fs::path(src), ec);
  if (ec) return NotFound("cannot read src " + Quote(src) + ": " + ec.message());
  const fs::path rel = target.lexically_relative(base);
  if (rel.empty() || *rel.begin() == "..") {
    return InvalidArgument("src " + Quote(src) +
                           " resolves outside the schema's folder (through a symbolic link)");
  }
  if (!fs::is_regular_file(target, ec)) {
    return InvalidArgument("src " + Quote(src) + " is not a regular file");
  }
  const uintmax_t size = fs::file_size(target, ec);
  if (ec) return IoError("cannot read src " + Quote(src) + ": " + ec.message());
  if (size > kMaxSrcBytes) {
    return InvalidArgument("src " + Quote(src) + " is " + std::to_string(size) +
                           " bytes, more than the limit of " + std::to_string(kMaxSrcBytes));
  }
  std::ifstream in(target, std::ios::binary);
  std::string text(static_cast<size_t>(size), '\0');
  if (!in || !in.read(text.data(), static_cast<std::streamsize>(text.size()))) {
    return IoError("cannot read src " + Quote(src) + ": " + std::strerror(errno));
  }
  return text;
}

}  // namespace

namespace pml_internal {

Status SchemaBuilder::ErrorAt(const PmlSourcePos& pos, const std::string& what,
                              StatusCode code) const {
  std::string msg = xml_.Where(pos) + ": ";
  if (!out_.name.empty()) msg += "schema '" + out_.name + "': ";
  return Status(code, msg + what);
}

Status SchemaBuilder::Error(const pugi::xml_node& node, const std::string& what,
                            StatusCode code) const {
  return ErrorAt(xml_.PosOf(node), what, code);
}

Status SchemaBuilder::CheckAttributes(const pugi::xml_node& node,
                                      std::initializer_list<const char*> allowed,
                                      const std::string& what) const {
  std::vector<std::string_view> seen;
  for (pugi::xml_attribute attr : node.attributes()) {
    const std::string_view name = attr.name();
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
      return Error(node, what + ": attribute '" + std::string(name) + "' given twice");
    }
    seen.push_back(name);
    bool ok = false;
    std::string list;
    for (const char* a : allowed) {
      ok = ok || name == a;
      list += (list.empty() ? "" : ", ") + std::string(a);
    }
    if (!ok) {
      return Error(node, what + ": unknown attribute '" + std::string(name) + "' (<" + node.name() +
                             "> takes " + (list.empty() ? "none" : list) + ")");
    }
  }
  return Status::Ok();
}

Result<int> SchemaBuilder::ParseLength(const pugi::xml_node& node, const char* value,
                                       const std::string& what) const {
  const std::string_view v = value;
  int64_t n = 0;
  bool digits = !v.empty();
  for (char c : v) {
    if (c < '0' || c > '9') {
      digits = false;
      break;
    }
    n = std::min<int64_t>(n * 10 + (c - '0'), kMaxLength + 1);
  }
  if (!digits || n == 0) {
    return Error(node, what + ": length " + Quote(v) + " is not a positive integer");
  }
  if (n > kMaxLength) {
    return Error(node, what + ": length " + Quote(v) + " is too large (at most " +
                           std::to_string(kMaxLength) + ")");
  }
  return static_cast<int>(n);
}

Result<bool> SchemaBuilder::ParseBool(const pugi::xml_node& node, const char* attr,
                                      const std::string& what) const {
  const std::string_view v = node.attribute(attr).value();
  if (v == "true") return true;
  if (v == "false") return false;
  return Error(node, what + ": " + attr + "=" + Quote(v) + " must be \"true\" or \"false\"");
}

Status SchemaBuilder::CheckDepth(const pugi::xml_node& node, int depth) const {
  if (depth > kMaxDepth) {
    return Error(node, "elements nested deeper than " + std::to_string(kMaxDepth) + " levels");
  }
  return Status::Ok();
}

Status SchemaBuilder::Advance(const pugi::xml_node& node, int64_t n) {
  pos_ += n;
  if (pos_ > kMaxPositions) {
    return Error(node, "schema needs more than " + std::to_string(kMaxPositions) + " positions",
                 StatusCode::kOutOfRange);
  }
  return Status::Ok();
}

// Tokenizes the pending text run (with the BOS before the first always-included run) and
// appends it as a piece of `owner` at the current position.
Status SchemaBuilder::Flush(int owner) {
  const bool bos = owner == kPmlAlways && bos_pending_;
  if (pending_.empty() && !bos) return Status::Ok();
  PmlTextPiece piece;
  piece.start = static_cast<int>(pos_);
  if (bos) {
    piece.tokens.push_back(*out_.bos);
    bos_pending_ = false;
  }
  if (!pending_.empty()) {
    const int context = enc_.ContextLength();
    const int per_token = enc_.MaxTokenBytes();
    if (context > 0 && per_token > 0 && pending_.size() > size_t(context) * size_t(per_token)) {
      const size_t at_least = (pending_.size() + per_token - 1) / per_token;
      return ErrorAt(owner == kPmlAlways ? xml_.PosOf(xml_.root()) : out_.modules[owner].pos,
                     (owner == kPmlAlways ? std::string("the always-included text")
                                          : "module '" + out_.modules[owner].name + "'") +
                         " has " + std::to_string(pending_.size()) + " bytes of text: at least " +
                         std::to_string(at_least) + " tokens, more than the model's context of " +
                         std::to_string(context),
                     StatusCode::kOutOfRange);
    }
    const std::vector<int32_t> tokens = enc_.Tokenize(MarkedText::Trusted(pending_));
    piece.tokens.insert(piece.tokens.end(), tokens.begin(), tokens.end());
    pending_.clear();
  }
  if (piece.tokens.empty()) return Status::Ok();
  pos_ += static_cast<int64_t>(piece.tokens.size());
  if (pos_ > kMaxPositions) {
    return ErrorAt(owner == kPmlAlways ? xml_.PosOf(xml_.root()) : out_.modules[owner].pos,
                   "schema needs more than " + std::to_string(kMaxPositions) + " positions",
                   StatusCode::kOutOfRange);
  }
  (owner == kPmlAlways ? out_.always : out_.modules[owner].texts).push_back(std::move(piece));
  return Status::Ok();
}

// The children of <schema>, a <module> or a role tag.
Status SchemaBuilder::WalkContent(const pugi::xml_node& parent, const Context& ctx) {
  for (pugi::xml_node child : parent.children()) {
    switch (child.type()) {
      case pugi::node_pcdata:
        pending_ += NormalizeText(child.value());
        break;
      case pugi::node_cdata:
        pending_ += child.value();
        break;
      case pugi::node_element: {
        PC_RETURN_IF_ERROR(CheckDepth(child, ctx.depth + 1));
        const std::string_view name = child.name();
        if (name == "module") {
          PC_RETURN_IF_ERROR(Flush(ctx.owner));
          PC_RETURN_IF_ERROR(AddModule(child, ctx, -1, -1));
        } else if (name == "union") {
          PC_RETURN_IF_ERROR(Flush(ctx.owner));
          PC_RETURN_IF_ERROR(AddUnion(child, ctx));
        } else if (name == "scaffold") {
          PC_RETURN_IF_ERROR(Flush(ctx.owner));
          PC_RETURN_IF_ERROR(AddScaffold(child, ctx));
        } else if (name == "parameter") {
          if (ctx.owner == kPmlAlways) {
            return Error(child, "<parameter> outside any module (parameters belong to modules)");
          }
          PC_RETURN_IF_ERROR(Flush(ctx.owner));
          PC_RETURN_IF_ERROR(AddParameter(child, ctx));
        } else if (IsRoleTag(name)) {
          if (ctx.in_role) {
            return Error(child, "<" + std::string(name) + "> inside <" + parent.name() +
                                    ">: chat turns do not nest");
          }
          PC_RETURN_IF_ERROR(CheckAttributes(child, {}, "<" + std::string(name) + ">"));
          auto [before, after] = enc_.RoleWrap(name);
          pending_ += before;
          Context inner = ctx;
          inner.in_role = true;
          inner.depth = ctx.depth + 1;
          PC_RETURN_IF_ERROR(WalkContent(child, inner));
          pending_ += after;
        } else {
          return Error(child, "unknown element <" + std::string(name) +
                                  "> (expected module, union, scaffold, parameter, system, "
                                  "user or assistant)");
        }
        break;
      }
      default:
        break;  // comments, processing instructions and the like carry no text
    }
  }
  return Status::Ok();
}

Status SchemaBuilder::AddModule(const pugi::xml_node& node, const Context& ctx, int union_index,
                                int scaffold_index) {
  const std::string name = node.attribute("name").value();
  const std::string what = "module '" + name + "'";
  if (!node.attribute("name")) return Error(node, "<module> without a name attribute");
  if (!IsValidName(name)) {
    return Error(node, "module name " + Quote(name) +
                           " is not valid (at most 128 letters, digits, '_', '.', '-'; not "
                           "starting with a digit, '.' or '-')");
  }
  if (IsRoleTag(name)) {
    return Error(node, "module name '" + name + "' is reserved for the chat role tag");
  }
  PC_RETURN_IF_ERROR(CheckAttributes(
      node, {"name", "src", "length", "cache", "required", "requires", "excludes"}, what));
  if (auto it = module_index_.find(name); it != module_index_.end()) {
    return Error(node, "duplicate module name '" + name + "' (first defined at " +
                           xml_.Where(out_.modules[it->second].pos) + ")");
  }
  const int index = static_cast<int>(out_.modules.size());
  module_index_.emplace(name, index);
  PmlModule m;
  m.name = name;
  m.pos = xml_.PosOf(node);
  m.parent = ctx.owner;
  m.union_index = union_index;
  m.scaffold_index = scaffold_index;
  m.src = node.attribute("src").value();
  if (node.attribute("cache")) {
    PC_ASSIGN_OR_RETURN(m.cached, ParseBool(node, "cache", what));
  }
  if (ctx.owner != kPmlAlways && !out_.modules[ctx.owner].cached) {
    if (m.cached && node.attribute("cache")) {
      return Error(node, what + ": cache=\"true\" inside module '" + out_.modules[ctx.owner].name +
                             "', which is not cached");
    }
    m.cached = false;  // computed at request time together with its parent
  }
  if (node.attribute("required")) {
    PC_ASSIGN_OR_RETURN(m.required, ParseBool(node, "required", what));
  }
  if (m.required && union_index >= 0) {
    return Error(node, what +
                           ": a union member cannot be required (a prompt picks at most one "
                           "member; use the union's scaffold for a default)");
  }
  if (node.attribute("length")) {
    PC_ASSIGN_OR_RETURN(m.length, ParseLength(node, node.attribute("length").value(), what));
    m.fixed_length = true;
  }
  PendingRefs refs;
  refs.requires_names = SplitSpaces(node.attribute("requires").value());
  refs.excludes_names = SplitSpaces(node.attribute("excludes").value());
  out_.modules.push_back(std::move(m));
  refs_.push_back(std::move(refs));
  if (ctx.owner != kPmlAlways) out_.modules[ctx.owner].children.push_back(index);
  return ModuleBody(node, index, ctx);
}

// Lays out a module's text (inline or from src) and checks it fits its length.
Status SchemaBuilder::ModuleBody(const pugi::xml_node& node, int index, const Context& ctx) {
  const std::string what = "module '" + out_.modules[index].name + "'";
  const int64_t start = pos_;
  out_.modules[index].start = static_cast<int>(start);
  if (node.attribute("src")) {
    for (pugi::xml_node child : node.children()) {
      if (child.type() == pugi::node_element ||
          ((child.type() == pugi::node_pcdata || child.type() == pugi::node_cdata) &&
           !IsAllSpace(child.value()))) {
        return Error(node, what + ": has both src and content; use one");
      }
    }
    auto text = ReadSrc(base_dir_, out_.modules[index].src);
    if (!text.ok()) return Error(node, what + ": " + text.status().message(), text.status().code());
    pending_ = std::move(text).value();
  } else {
    Context inner{index, ctx.in_role, ctx.depth + 1};
    PC_RETURN_IF_ERROR(WalkContent(node, inner));
  }
  PC_RETURN_IF_ERROR(Flush(index));
  PmlModule& m = out_.modules[index];
  for (const PmlTextPiece& p : m.texts) m.token_count += static_cast<int>(p.tokens.size());
  const int64_t natural = pos_ - start;
  if (m.fixed_length) {
    if (natural > m.length) {
      if (natural == m.token_count) {
        return Error(node, what + ": text is " + std::to_string(natural) +
                               " tokens, longer than its length " + std::to_string(m.length));
      }
      return Error(node, what + ": content needs " + std::to_string(natural) + " positions (" +
                             std::to_string(m.token_count) +
                             " text tokens, the rest parameters and nested modules), more "
                             "than its length " +
                             std::to_string(m.length));
    }
    pos_ = start + m.length;
  } else {
    m.length = static_cast<int>(natural);
  }
  return Status::Ok();
}

// The children of a <union> or <scaffold> (`group`): <module> elements, each added by
// `add_member` one level deeper, and space between them; any other text or element is an error.
Status SchemaBuilder::AddMembers(
    const pugi::xml_node& node, const Context& ctx, const char* group,
    const std::function<Status(const pugi::xml_node&, const Context&)>& add_member) {
  const std::string only =
      std::string(" inside <") + group + "> (only <module> elements belong there)";
  Context inner{ctx.owner, ctx.in_role, ctx.depth + 1};
  for (pugi::xml_node child : node.children()) {
    if (child.type() == pugi::node_pcdata || child.type() == pugi::node_cdata) {
      if (!IsAllSpace(child.value())) {
        return Error(child, "text " + Quote(NormalizeText(child.value())) + only);
      }
    } else if (child.type() == pugi::node_element) {
      PC_RETURN_IF_ERROR(CheckDepth(child, inner.depth));
      if (std::string_view(child.name()) != "module") {
        return Error(child, "<" + std::string(child.name()) + ">" + only);
      }
      PC_RETURN_IF_ERROR(add_member(child, inner));
    }
  }
  return Status::Ok();
}

Status SchemaBuilder::AddUnion(const pugi::xml_node& node, const Context& ctx) {
  PC_RETURN_IF_ERROR(CheckAttributes(node, {"scaffold"}, "<union>"));
  const int index = static_cast<int>(out_.unions.size());
  out_.unions.emplace_back();
  out_.unions[index].pos = xml_.PosOf(node);
  out_.unions[index].parent = ctx.owner;
  out_.unions[index].start = static_cast<int>(pos_);
  const int64_t start = pos_;
  int64_t longest = 0;
  auto add_member = [&](const pugi::xml_node& child, const Context& inner) -> Status {
    pos_ = start;  // every member starts at the union's start
    const int member = static_cast<int>(out_.modules.size());
    PC_RETURN_IF_ERROR(AddModule(child, inner, index, -1));
    out_.unions[index].members.push_back(member);
    longest = std::max<int64_t>(longest, out_.modules[member].length);
    return Status::Ok();
  };
  PC_RETURN_IF_ERROR(AddMembers(node, ctx, "union", add_member));
  PmlUnion& u = out_.unions[index];
  if (u.members.empty()) return Error(node, "<union> without any <module>");
  u.length = static_cast<int>(longest);
  if (pugi::xml_attribute scaffold = node.attribute("scaffold")) {
    std::vector<std::string> names;
    for (int m : u.members) {
      names.push_back(out_.modules[m].name);
      if (out_.modules[m].name == scaffold.value()) u.default_member = m;
    }
    if (u.default_member < 0) {
      return Error(node, "union scaffold " + Quote(scaffold.value()) +
                             " is not one of its modules (" + JoinNames(names) + ")");
    }
  }
  pos_ = start;
  return Advance(node, longest);
}

Status SchemaBuilder::AddScaffold(const pugi::xml_node& node, const Context& ctx) {
  PC_RETURN_IF_ERROR(CheckAttributes(node, {}, "<scaffold>"));
  const int index = static_cast<int>(out_.scaffolds.size());
  out_.scaffolds.emplace_back();
  out_.scaffolds[index].pos = xml_.PosOf(node);
  out_.scaffolds[index].parent = ctx.owner;
  auto add_member = [&](const pugi::xml_node& child, const Context& inner) -> Status {
    const int member = static_cast<int>(out_.modules.size());
    PC_RETURN_IF_ERROR(AddModule(child, inner, -1, index));
    out_.scaffolds[index].members.push_back(member);
    return Status::Ok();
  };
  PC_RETURN_IF_ERROR(AddMembers(node, ctx, "scaffold", add_member));
  if (out_.scaffolds[index].members.empty()) return Error(node, "<scaffold> without any <module>");
  return Status::Ok();
}

Status SchemaBuilder::AddParameter(const pugi::xml_node& node, const Context& ctx) {
  PmlModule& owner = out_.modules[ctx.owner];
  const std::string name = node.attribute("name").value();
  const std::string where = "module '" + owner.name + "'";
  const std::string what = where + ": parameter '" + name + "'";
  if (!node.attribute("name")) return Error(node, where + ": <parameter> without a name");
  if (!IsValidName(name)) {
    return Error(node, where + ": parameter name " + Quote(name) +
                           " is not valid (at most 128 letters, digits, '_', '.', '-'; not "
                           "starting with a digit, '.' or '-')");
  }
  PC_RETURN_IF_ERROR(CheckAttributes(node, {"name", "length", "scaffold"}, what));
  for (const PmlParameter& p : owner.parameters) {
    if (p.name == name) {
      return Error(node, where + ": duplicate parameter name '" + name + "' (first defined at " +
                             xml_.Where(p.pos) + ")");
    }
  }
  if (!node.attribute("length")) {
    return Error(node, what + ": no length (a parameter reserves length=\"N\" positions)");
  }
  for (pugi::xml_node child : node.children()) {
    if (child.type() == pugi::node_element ||
        ((child.type() == pugi::node_pcdata || child.type() == pugi::node_cdata) &&
         !IsAllSpace(child.value()))) {
      return Error(node, what +
                             ": <parameter> must be empty (its default is the scaffold "
                             "attribute)");
    }
  }
  PmlParameter p;
  p.name = name;
  p.pos = xml_.PosOf(node);
  PC_ASSIGN_OR_RETURN(p.length, ParseLength(node, node.attribute("length").value(), what));
  if (pugi::xml_attribute scaffold = node.attribute("scaffold")) {
    p.scaffold = scaffold.value();
    p.scaffold_tokens = enc_.Tokenize(MarkedText::Trusted(*p.scaffold));
    if (static_cast<int64_t>(p.scaffold_tokens.size()) > p.length) {
      return Error(node, what + ": scaffold " + Quote(*p.scaffold) + " is " +
                             std::to_string(p.scaffold_tokens.size()) +
                             " tokens, longer than its length " + std::to_string(p.length));
    }
  }
  p.start = static_cast<int>(pos_);
  const int length = p.length;
  owner.parameters.push_back(std::move(p));
  return Advance(node, length);
}

}  // namespace pml_internal
}  // namespace promptcache
