// XML parsing with source positions, and PML's text normalization.
#include <algorithm>
#include <exception>
#include <new>

#include "pml/pml_internal.h"

namespace promptcache::pml_internal {

Result<std::unique_ptr<XmlSource>> XmlSource::Parse(std::string_view xml, std::string file) {
  std::unique_ptr<XmlSource> src(new XmlSource());
  src->file_ = std::move(file);
  src->text_.assign(xml.data(), xml.size());
  src->line_starts_.push_back(0);
  for (size_t i = 0; i < xml.size(); ++i) {
    if (xml[i] == '\n') src->line_starts_.push_back(i + 1);
  }
  pugi::xml_parse_result result;
  try {
    // parse_default includes parse_eol (CRLF -> LF), parse_escapes and CDATA; parse_ws_pcdata
    // keeps whitespace-only text so "a <parameter/>" and indentation are seen as written;
    // parse_fragment keeps text outside the root so that it can be rejected below.
    result = src->doc_.load_buffer(
        xml.data(), xml.size(), pugi::parse_default | pugi::parse_ws_pcdata | pugi::parse_fragment,
        pugi::encoding_utf8);
  } catch (const std::exception& e) {  // pugixml reports failure by result, but be safe
    return InvalidArgument(src->file_ + ": cannot parse XML: " + e.what());
  }
  if (!result) {
    return InvalidArgument(src->Where(src->PosAt(result.offset)) +
                           ": malformed XML: " + result.description());
  }
  int elements = 0;
  for (pugi::xml_node child : src->doc_.children()) {
    if (child.type() == pugi::node_element) {
      if (++elements > 1) {
        return InvalidArgument(src->Where(src->PosOf(child)) + ": malformed XML: element <" +
                               child.name() + "> after the root element");
      }
    } else if ((child.type() == pugi::node_pcdata || child.type() == pugi::node_cdata) &&
               !IsAllSpace(child.value())) {
      return InvalidArgument(src->Where(src->PosOf(child)) +
                             ": malformed XML: text outside the root element");
    }
  }
  if (elements == 0) {
    return InvalidArgument(src->Where({1, 1}) + ": malformed XML: no root element");
  }
  return src;
}

PmlSourcePos XmlSource::PosOf(const pugi::xml_node& node) const {
  ptrdiff_t offset = node.offset_debug();
  if (offset < 0) return {};
  // For an element pugixml points at its name; report the '<' before it.
  if (node.type() == pugi::node_element && offset > 0 &&
      static_cast<size_t>(offset) <= text_.size() && text_[offset - 1] == '<') {
    --offset;
  }
  return PosAt(offset);
}

PmlSourcePos XmlSource::PosAt(ptrdiff_t offset) const {
  if (offset < 0) return {};
  const size_t off = std::min(static_cast<size_t>(offset), text_.size());
  const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), off);
  const size_t line = static_cast<size_t>(it - line_starts_.begin());  // 1-based
  size_t begin = line_starts_[line - 1];
  int column = 1;
  // Positions are asked for in document order: continue from the last one on the same line, so
  // a schema written on one long line costs linear time, not quadratic.
  if (last_line_ == line && last_offset_ <= off) {
    begin = last_offset_;
    column = last_column_;
  }
  for (size_t i = begin; i < off; ++i) {
    // Count UTF-8 characters: every byte that is not a continuation byte starts one.
    if ((static_cast<unsigned char>(text_[i]) & 0xC0) != 0x80) ++column;
  }
  last_line_ = line;
  last_offset_ = off;
  last_column_ = column;
  return {static_cast<int>(line), column};
}

std::string XmlSource::Where(const PmlSourcePos& pos) const { return FormatPos(file_, pos); }

std::string FormatPos(const std::string& file, const PmlSourcePos& pos) {
  if (pos.line <= 0) return file;
  std::string s = file + ":" + std::to_string(pos.line);
  if (pos.column > 0) s += ":" + std::to_string(pos.column);
  return s;
}

bool IsXmlSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool IsAllSpace(std::string_view text) { return std::all_of(text.begin(), text.end(), IsXmlSpace); }

bool IsValidName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  auto alpha = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  if (!alpha(name[0])) return false;
  return std::all_of(name.begin() + 1, name.end(), [&](char c) {
    return alpha(c) || (c >= '0' && c <= '9') || c == '.' || c == '-';
  });
}

bool IsRoleTag(std::string_view name) {
  return name == "system" || name == "user" || name == "assistant";
}

std::string Quote(std::string_view text, size_t max_chars) {
  std::string out = "'";
  size_t n = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (n >= max_chars) {
      // Do not cut a UTF-8 sequence in half.
      while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) {
        out += text[i++];
      }
      if (i < text.size()) out += "...";
      break;
    }
    const char c = text[i];
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += '?';
    } else {
      out += c;
    }
    ++n;
  }
  return out + "'";
}

namespace {

// Leading spaces/tabs of the line that starts at `begin` (up to `end`).
size_t IndentOf(std::string_view s, size_t begin, size_t end) {
  size_t i = begin;
  while (i < end && (s[i] == ' ' || s[i] == '\t')) ++i;
  return i - begin;
}

bool LineIsBlank(std::string_view s, size_t begin, size_t end) {
  for (size_t i = begin; i < end && s[i] != '\n'; ++i) {
    if (!IsXmlSpace(s[i])) return false;
  }
  return true;
}

}  // namespace

std::string NormalizeText(std::string_view s) {
  const size_t n = s.size();
  size_t b = 0;
  while (b < n && IsXmlSpace(s[b])) ++b;
  if (b == n) {  // whitespace only: indentation if it spans lines, else a meaningful space
    return s.find('\n') == std::string_view::npos ? std::string(s) : std::string();
  }
  size_t e = n;
  while (e > b && IsXmlSpace(s[e - 1])) --e;
  const bool trim_lead = s.substr(0, b).find('\n') != std::string_view::npos;
  const bool trim_tail = s.substr(e).find('\n') != std::string_view::npos;
  const size_t content_begin = trim_lead ? b : 0;
  const size_t content_end = trim_tail ? e : n;

  // Starts of the lines whose indentation is known: those after a line break, and the first
  // content line when the text began with a line break (its indentation is s[last_nl+1, b)).
  struct Line {
    size_t begin;  // where the line's characters begin in s
    bool first;    // the first content line, whose indentation was trimmed with the lead
  };
  std::vector<Line> lines;
  size_t first_indent_begin = 0;
  if (trim_lead) {
    first_indent_begin = s.substr(0, b).rfind('\n') + 1;
    lines.push_back({first_indent_begin, true});
  }
  for (size_t i = content_begin; i < content_end; ++i) {
    if (s[i] == '\n') lines.push_back({i + 1, false});
  }
  // Common indentation (as a string prefix) of the non-blank lines.
  std::string_view common;
  bool have_common = false;
  for (const Line& line : lines) {
    const size_t stop = line.first ? b : content_end;
    if (!line.first && LineIsBlank(s, line.begin, content_end)) continue;
    const std::string_view indent = s.substr(line.begin, IndentOf(s, line.begin, stop));
    if (!have_common) {
      common = indent;
      have_common = true;
    } else {
      size_t k = 0;
      while (k < common.size() && k < indent.size() && common[k] == indent[k]) ++k;
      common = common.substr(0, k);
    }
  }

  std::string out;
  out.reserve(content_end - content_begin);
  size_t i = content_begin;
  bool at_line_start = false;
  while (i < content_end) {
    if (at_line_start) {
      at_line_start = false;
      if (LineIsBlank(s, i, content_end)) {  // whitespace-only line: keep just its break
        while (i < content_end && s[i] != '\n') ++i;
      } else {
        i += common.size();  // every non-blank line after a break starts with `common`
      }
      continue;
    }
    const char c = s[i++];
    out += c;
    if (c == '\n') at_line_start = true;
  }
  return out;
}

}  // namespace promptcache::pml_internal
