// Schema layout: the passes after the walk in pml_schema.cc that resolve requires/excludes, check
// the context, and compute attention spans and content keys; SchemaLayout's lookups; and the
// ParseSchema/LoadSchema entry points.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "core/hash.h"
#include "pml/pml.h"
#include "pml/pml_internal.h"
#include "pml/pml_schema_builder.h"

namespace promptcache {
namespace {

using pml_internal::IsValidName;
using pml_internal::kMaxSpanReferences;
using pml_internal::Quote;
using pml_internal::SchemaBuilder;

std::string PieceKey(const PmlTextPiece& piece, const std::vector<const std::string*>& deps) {
  Hasher128 h;
  h.Update(std::string_view("pml-piece-v1"));
  h.UpdatePod(static_cast<int64_t>(piece.start));
  h.UpdatePod(static_cast<uint64_t>(piece.tokens.size()));
  h.Update(piece.tokens.data(), piece.tokens.size() * sizeof(int32_t));
  h.UpdatePod(static_cast<uint64_t>(deps.size()));
  for (const std::string* d : deps) h.Update(*d);
  return h.HexDigest();
}

// What stands in m's parameter slots in [from, to) while its text is encoded: the scaffold
// defaults, by position; "" when none.
std::string FillsKey(const PmlModule& m, int from, int to) {
  Hasher128 h;
  bool any = false;
  for (const PmlParameter& p : m.parameters) {
    if (!p.scaffold || p.start < from || p.start >= to) continue;
    any = true;
    h.UpdatePod(static_cast<int64_t>(p.start));
    h.UpdatePod(static_cast<uint64_t>(p.scaffold_tokens.size()));
    h.Update(p.scaffold_tokens.data(), p.scaffold_tokens.size() * sizeof(int32_t));
  }
  return any ? h.HexDigest() : "";
}

}  // namespace

namespace pml_internal {

Status SchemaBuilder::ResolveReferences() {
  for (size_t i = 0; i < out_.modules.size(); ++i) {
    PmlModule& m = out_.modules[i];
    auto resolve = [&](const std::vector<std::string>& names, const char* attr,
                       std::vector<int>* into) -> Status {
      for (const std::string& n : names) {
        auto it = module_index_.find(n);
        if (it == module_index_.end()) {
          return ErrorAt(m.pos, "module '" + m.name + "': " + attr + " unknown module " + Quote(n));
        }
        if (it->second == static_cast<int>(i)) {
          return ErrorAt(m.pos, "module '" + m.name + "': " + attr + " itself");
        }
        if (std::find(into->begin(), into->end(), it->second) == into->end()) {
          into->push_back(it->second);
        }
      }
      return Status::Ok();
    };
    PC_RETURN_IF_ERROR(resolve(refs_[i].requires_names, "requires", &m.requires_modules));
    PC_RETURN_IF_ERROR(resolve(refs_[i].excludes_names, "excludes", &m.excludes_modules));
    for (int r : m.requires_modules) {
      if (std::find(m.excludes_modules.begin(), m.excludes_modules.end(), r) !=
          m.excludes_modules.end()) {
        return ErrorAt(m.pos, "module '" + m.name + "': both requires and excludes '" +
                                  out_.modules[r].name + "'");
      }
    }
  }
  return Status::Ok();
}

Status SchemaBuilder::CheckContext() const {
  const int context = enc_.ContextLength();
  if (context <= 0 || out_.total_length <= context) return Status::Ok();
  std::string first;
  for (const PmlModule& m : out_.modules) {
    if (m.end() > context) {
      first = " (module '" + m.name + "' at [" + std::to_string(m.start) + ", " +
              std::to_string(m.end()) + ") is the first to pass it)";
      break;
    }
  }
  return ErrorAt(xml_.PosOf(xml_.root()),
                 "total length " + std::to_string(out_.total_length) +
                     " positions exceeds the model's context of " + std::to_string(context) + first,
                 StatusCode::kOutOfRange);
}

Status SchemaBuilder::ComputeSpans() {
  auto refuse = [&](const std::string& who) {
    return ErrorAt(xml_.PosOf(xml_.root()),
                   "the text pieces attend to more than " + std::to_string(kMaxSpanReferences) +
                       " earlier pieces in all (" + who +
                       " passes it): this grows as the square of the pieces between sibling "
                       "modules, or between one module's parameters; move such text into the "
                       "sibling modules, or split the module",
                   StatusCode::kOutOfRange);
  };
  // Each always piece attends to the ones before it.
  const int64_t always = static_cast<int64_t>(out_.always.size());
  int64_t references = always * (always - 1) / 2;
  if (references > kMaxSpanReferences) return refuse("the always text");
  for (size_t i = 0; i < out_.modules.size(); ++i) {
    PmlModule& m = out_.modules[i];
    const int64_t own = static_cast<int64_t>(m.texts.size());
    const int64_t weight = 1 + own;
    references += own * (own - 1) / 2;  // each own piece attends to the ones before it
    std::vector<PmlTextRef> span;
    auto add_texts = [&](int owner, bool only_before) {
      const auto& pieces = owner == kPmlAlways ? out_.always : out_.modules[owner].texts;
      for (size_t j = 0; j < pieces.size() && references <= kMaxSpanReferences; ++j) {
        if (only_before && pieces[j].end() > m.start) break;  // pieces are in position order
        span.push_back({owner, static_cast<int>(j)});
        references += weight;
      }
    };
    add_texts(kPmlAlways, true);
    for (int a = m.parent; a != -1; a = out_.modules[a].parent) add_texts(a, true);
    if (m.scaffold_index >= 0) {
      for (int peer : out_.scaffolds[m.scaffold_index].members) {
        if (peer == static_cast<int>(i)) break;  // members are in position order
        if (out_.modules[peer].cached) add_texts(peer, false);
      }
    }
    if (references > kMaxSpanReferences) return refuse("module '" + m.name + "'");
    std::stable_sort(span.begin(), span.end(), [&](const PmlTextRef& a, const PmlTextRef& b) {
      return out_.Piece(a).start < out_.Piece(b).start;
    });
    m.span = std::move(span);
  }
  return Status::Ok();
}

void SchemaBuilder::ComputeKeys() {
  // Always pieces attend to the earlier ones: chaining each key to the previous one covers all.
  const std::string* prev = nullptr;
  for (PmlTextPiece& p : out_.always) {
    std::vector<const std::string*> deps;
    if (prev != nullptr) deps.push_back(prev);
    p.key = PieceKey(p, deps);
    prev = &p.key;
  }
  // Index order: every span refers to always text or to modules with smaller indices.
  for (PmlModule& m : out_.modules) {
    std::vector<const std::string*> span_keys;
    for (const PmlTextRef& ref : m.span) span_keys.push_back(&out_.Piece(ref).key);
    const std::string* own_prev = nullptr;
    int prev_end = m.start;
    for (PmlTextPiece& p : m.texts) {
      std::vector<const std::string*> deps = span_keys;
      if (own_prev != nullptr) deps.push_back(own_prev);
      // Text after a parameter slot is encoded with the scaffold default standing in it.
      const std::string fills = FillsKey(m, prev_end, p.start);
      if (!fills.empty()) deps.push_back(&fills);
      p.key = PieceKey(p, deps);
      own_prev = &p.key;
      prev_end = p.end();
    }
    Hasher128 h;
    h.Update(std::string_view("pml-module-v1"));
    h.UpdatePod(static_cast<int64_t>(m.start));
    h.UpdatePod(static_cast<uint64_t>(span_keys.size()));
    for (const std::string* k : span_keys) h.Update(*k);
    h.UpdatePod(static_cast<uint64_t>(m.texts.size()));
    for (const PmlTextPiece& p : m.texts) h.Update(p.key);
    m.key = h.HexDigest();
  }
}

Result<SchemaLayout> SchemaBuilder::Build() {
  const pugi::xml_node root = xml_.root();
  if (std::string_view(root.name()) != "schema") {
    return Error(root, "the root element is <" + std::string(root.name()) +
                           ">, expected <schema name=\"...\">");
  }
  const std::string name = root.attribute("name").value();
  if (!root.attribute("name")) return Error(root, "<schema> without a name attribute");
  if (!IsValidName(name)) {
    return Error(root, "schema name " + Quote(name) +
                           " is not valid (at most 128 letters, digits, '_', '.', '-'; not "
                           "starting with a digit, '.' or '-')");
  }
  out_.name = name;
  out_.file = xml_.file();
  PC_RETURN_IF_ERROR(CheckAttributes(root, {"name"}, "<schema>"));
  out_.context_length = enc_.ContextLength();
  out_.bos = enc_.Bos();
  bos_pending_ = out_.bos.has_value();
  PC_RETURN_IF_ERROR(WalkContent(root, Context{}));
  PC_RETURN_IF_ERROR(Flush(kPmlAlways));
  out_.total_length = static_cast<int>(pos_);
  PC_RETURN_IF_ERROR(ResolveReferences());
  PC_RETURN_IF_ERROR(CheckContext());
  PC_RETURN_IF_ERROR(ComputeSpans());
  ComputeKeys();
  return std::move(out_);
}

}  // namespace pml_internal

int SchemaLayout::FindModule(std::string_view module_name) const {
  for (size_t i = 0; i < modules.size(); ++i) {
    if (modules[i].name == module_name) return static_cast<int>(i);
  }
  return -1;
}

const PmlTextPiece& SchemaLayout::Piece(const PmlTextRef& ref) const {
  PC_CHECK(ref.module >= kPmlAlways && ref.module < static_cast<int>(modules.size()));
  const auto& pieces = ref.module == kPmlAlways ? always : modules[ref.module].texts;
  PC_CHECK(ref.piece >= 0 && ref.piece < static_cast<int>(pieces.size()));
  return pieces[ref.piece];
}

Result<SchemaLayout> ParseSchema(std::string_view xml, const std::string& path,
                                 const PmlTextEncoder& encoder) {
  PC_ASSIGN_OR_RETURN(auto source, pml_internal::XmlSource::Parse(xml, path));
  std::string base = std::filesystem::path(path).parent_path().string();
  SchemaBuilder builder(*source, encoder, base.empty() ? "." : base);
  return builder.Build();
}

Result<SchemaLayout> LoadSchema(const std::string& path, const PmlTextEncoder& encoder) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open schema file: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return IoError(path + ": cannot read schema file: " + std::strerror(errno));
  return ParseSchema(text.str(), path, encoder);
}

}  // namespace promptcache
