// How deeply JSON text nests, measured on the raw bytes before any parser sees it.
//
// nlohmann's parser is iterative, but copying a parsed value, dump(), operator== and every walk
// over it (the JSON-schema compiler, Jinja's conversion, tool definitions) recurse once per
// level: a request of 100,000 nested brackets overflowed the stack there. Counting '[' and '{'
// outside strings is linear, needs no memory, and is done first, so nothing recursive ever sees
// text nested deeper than a small bound. Malformed text is not judged here (the parser reports
// it); only its depth is.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace promptcache {

// The deepest nesting accepted in JSON from outside (request bodies, JSON schemas, tool
// parameters and arguments). A JSON schema of kMaxSchemaDepth (json_schema.h) levels nests
// about 2 JSON levels per schema level, inside a request's few; real requests stay far below.
inline constexpr int kMaxJsonNesting = 256;

// The deepest nesting of arrays and objects in `text` (brackets inside strings do not count),
// counting no further than limit + 1 (so that the scan can stop early).
int JsonNestingDepth(std::string_view text, int limit = kMaxJsonNesting);

// InvalidArgument "WHAT nests arrays and objects deeper than N levels" when `text` does.
Status CheckJsonNesting(std::string_view text, std::string_view what, int limit = kMaxJsonNesting);

}  // namespace promptcache
