#include "grammar/json_depth.h"

namespace promptcache {

int JsonNestingDepth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character (a quote or a backslash) does not end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) {
        deepest = depth;
        if (deepest > limit) return deepest;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

Status CheckJsonNesting(std::string_view text, std::string_view what, int limit) {
  if (JsonNestingDepth(text, limit) <= limit) return Status::Ok();
  return InvalidArgument(std::string(what) + " nests arrays and objects deeper than " +
                         std::to_string(limit) + " levels");
}

}  // namespace promptcache
