// FormatLayout: the human-readable layout that `promptcache schema show` prints.
#include <algorithm>
#include <string>

#include "pml/pml.h"
#include "pml/pml_internal.h"

namespace promptcache {
namespace {

std::string Range(int start, int end) {
  return "[" + std::to_string(start) + ", " + std::to_string(end) + ")";
}

std::string Count(size_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string Pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

class Formatter {
 public:
  // The direct content of the schema (owner -1) and of each module, in document order: plain
  // modules, unions and scaffolds, each keyed by its first module's index. Gathered in one pass:
  // looking them up per module made a layout of n modules cost n^2 (150,000 union members took
  // a minute to register).
  explicit Formatter(const SchemaLayout& s) : s_(s), items_(s.modules.size() + 1) {
    for (const PmlModule& m : s.modules) name_width_ = std::max(name_width_, m.name.size());
    for (size_t i = 0; i < s.modules.size(); ++i) {
      const PmlModule& m = s.modules[i];
      if (m.union_index < 0 && m.scaffold_index < 0) {
        items_[m.parent + 1].push_back({static_cast<int>(i), 0, static_cast<int>(i)});
      }
    }
    for (size_t u = 0; u < s.unions.size(); ++u) {
      items_[s.unions[u].parent + 1].push_back(
          {s.unions[u].members.front(), 1, static_cast<int>(u)});
    }
    for (size_t k = 0; k < s.scaffolds.size(); ++k) {
      items_[s.scaffolds[k].parent + 1].push_back(
          {s.scaffolds[k].members.front(), 2, static_cast<int>(k)});
    }
    for (std::vector<Item>& items : items_) {
      std::sort(items.begin(), items.end(),
                [](const Item& a, const Item& b) { return a.first_module < b.first_module; });
    }
  }

  std::string Run() {
    out_ += "schema '" + s_.name + "' (" + s_.file + ")\n";
    out_ += "total length " + std::to_string(s_.total_length) + " positions";
    if (s_.context_length > 0) out_ += " of a " + std::to_string(s_.context_length) + " context";
    out_ += "; " + Count(s_.modules.size(), "module") + ", " + Count(s_.unions.size(), "union") +
            ", " + Count(s_.scaffolds.size(), "scaffold") + "\n";
    int always_tokens = 0;
    std::string ranges;
    for (const PmlTextPiece& p : s_.always) {
      always_tokens += static_cast<int>(p.tokens.size());
      ranges += " " + Range(p.start, p.end());
    }
    out_ += "always-included text: " + std::to_string(always_tokens) + " tokens" +
            (s_.bos ? " (BOS first)" : "") + (ranges.empty() ? "" : " at" + ranges) + "\n";
    out_ += "new prompt text starts at " + std::to_string(s_.total_length) + "\n";
    if (!s_.modules.empty()) out_ += "modules (range, reserved, tokens, flags):\n";
    Container(-1, 1);
    return out_;
  }

 private:
  void Container(int owner, int depth) {
    const std::vector<Item>& items = items_[owner + 1];
    const std::string indent(2 * depth, ' ');
    for (const Item& item : items) {
      if (item.kind == 0) {
        Module(item.index, depth);
      } else if (item.kind == 1) {
        const PmlUnion& u = s_.unions[item.index];
        out_ += indent + "union #" + std::to_string(item.index) + " " +
                Range(u.start, u.start + u.length) + ", length " + std::to_string(u.length) +
                (u.default_member >= 0 ? ", default " + s_.modules[u.default_member].name : "") +
                "\n";
        for (int m : u.members) Module(m, depth + 1);
      } else {
        out_ += indent + "scaffold #" + std::to_string(item.index) + "\n";
        for (int m : s_.scaffolds[item.index].members) Module(m, depth + 1);
      }
    }
  }

  void Module(int index, int depth) {
    const PmlModule& m = s_.modules[index];
    const std::string indent(2 * depth, ' ');
    const size_t width = name_width_ + 2 * 8 - std::min<size_t>(2 * depth, 16);
    std::vector<std::string> flags;
    flags.push_back(m.cached ? "cached" : "not cached");
    if (m.fixed_length) flags.push_back("length=" + std::to_string(m.length));
    if (m.required) flags.push_back("required");
    if (m.union_index >= 0) {
      flags.push_back("union #" + std::to_string(m.union_index) +
                      (s_.unions[m.union_index].default_member == index ? " default" : ""));
    }
    if (m.scaffold_index >= 0) flags.push_back("scaffold #" + std::to_string(m.scaffold_index));
    if (!m.src.empty()) flags.push_back("src=" + m.src);
    auto names = [&](const std::vector<int>& list) {
      std::string s;
      for (int i : list) s += (s.empty() ? "" : " ") + s_.modules[i].name;
      return s;
    };
    if (!m.requires_modules.empty()) flags.push_back("requires " + names(m.requires_modules));
    if (!m.excludes_modules.empty()) flags.push_back("excludes " + names(m.excludes_modules));
    std::string flag_text;
    for (const std::string& f : flags) flag_text += (flag_text.empty() ? "" : ", ") + f;
    out_ += indent + Pad(m.name, width) + "  " + Pad(Range(m.start, m.end()), 16) +
            Pad("reserved " + std::to_string(m.length), 14) +
            Pad(std::to_string(m.token_count) + " tokens", 12) + flag_text + "\n";
    const std::string sub = indent + "    ";
    for (const PmlParameter& p : m.parameters) {
      out_ += sub + "parameter " + p.name + " " + Range(p.start, p.end()) + " length " +
              std::to_string(p.length) +
              (p.scaffold ? ", scaffold " + pml_internal::Quote(*p.scaffold) : "") + "\n";
    }
    std::string span;
    for (const PmlTextRef& ref : m.span) {
      const PmlTextPiece& piece = s_.Piece(ref);
      span += (span.empty() ? "" : ", ") +
              (ref.module == kPmlAlways ? std::string("always") : s_.modules[ref.module].name) +
              " " + Range(piece.start, piece.end());
    }
    out_ += sub + "attends to: " + (span.empty() ? "nothing before it" : span) + "\n";
    Container(index, depth + 1);
  }

  struct Item {
    int first_module;
    int kind;  // 0 module, 1 union, 2 scaffold
    int index;
  };

  const SchemaLayout& s_;
  std::vector<std::vector<Item>> items_;  // by owner + 1
  size_t name_width_ = 0;
  std::string out_;
};

}  // namespace

std::string FormatLayout(const SchemaLayout& layout) { return Formatter(layout).Run(); }

}  // namespace promptcache
