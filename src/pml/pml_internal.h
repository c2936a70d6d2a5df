// Helpers shared by the PML schema and prompt parsers: pugixml parsing with positions for
// messages, text normalization and name rules. Not part of the public API (see pml.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <pugixml.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "pml/pml.h"

namespace promptcache::pml_internal {

// Deepest element nesting accepted: the walkers recurse, and real schemas are shallow.
inline constexpr int kMaxDepth = 64;

// Most references from a schema's text pieces to the earlier pieces they attend to, in all: each
// module's span (the pieces of always text and of its ancestors before it, and of its scaffold
// peers) counted once for the module's key and once for each piece of its own text, and each of
// those pieces counting the module's own pieces before it. Text between sibling modules, or
// between one module's parameters, makes this grow as the square of those pieces, and the
// encoding attends to each piece apart: unbounded, 1,600 such siblings (a 53 KB schema) took 14 s
// and a 69 MB reply on stories260K, and 5,000 parameters in one module (189 KB) took 75 s.
// Real schemas stay far below it.
inline constexpr int64_t kMaxSpanReferences = int64_t(1) << 19;

// A parsed XML document that remembers its text, to turn node offsets into line:column.
class XmlSource {
 public:
  // Parses `xml` (UTF-8) keeping whitespace-only text; malformed input gives InvalidArgument
  // "FILE:LINE:COL: malformed XML: DESCRIPTION". Checks there is exactly one root element and
  // no text outside it.
  static Result<std::unique_ptr<XmlSource>> Parse(std::string_view xml, std::string file);

  const pugi::xml_document& doc() const { return doc_; }
  pugi::xml_node root() const { return doc_.document_element(); }
  const std::string& file() const { return file_; }

  // Position of a node: an element's '<', a text node's first character.
  PmlSourcePos PosOf(const pugi::xml_node& node) const;
  PmlSourcePos PosAt(ptrdiff_t offset) const;
  // "FILE:LINE:COL".
  std::string Where(const PmlSourcePos& pos) const;

 private:
  XmlSource() = default;
  std::string file_;
  std::string text_;
  std::vector<size_t> line_starts_;
  // The last position PosAt computed (a cursor, not state anyone else sees).
  mutable size_t last_line_ = 0, last_offset_ = 0;
  mutable int last_column_ = 1;
  pugi::xml_document doc_;
};

// Text-node normalization (see "Text handling" in pml.h): drops leading/trailing whitespace runs
// that contain a line break and the common indentation of lines after line breaks.
std::string NormalizeText(std::string_view text);

bool IsXmlSpace(char c);
bool IsAllSpace(std::string_view text);

// [A-Za-z_][A-Za-z0-9_.-]*, at most kMaxNameLength characters (a schema's name names its file
// in the cache folder, and file names are limited).
inline constexpr size_t kMaxNameLength = 128;
bool IsValidName(std::string_view name);

// "system", "user" or "assistant".
bool IsRoleTag(std::string_view name);

// `text` quoted for a message, shortened to about `max_chars` bytes with "..." when longer, and
// control characters escaped, so a message stays one line.
std::string Quote(std::string_view text, size_t max_chars = 40);

// "file:L:C".
std::string FormatPos(const std::string& file, const PmlSourcePos& pos);

}  // namespace promptcache::pml_internal
