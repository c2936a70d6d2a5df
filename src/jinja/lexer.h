// The Jinja lexer: template source to tokens, with the whitespace rules that chat templates
// depend on character for character: Jinja2's trim_blocks and lstrip_blocks (as Hugging Face
// turns them on), "-" and "+" whitespace control on {{ }}, {% %} and {# #}, {% raw %}, newline
// normalization and the one trailing newline Jinja2 drops. Comments produce no tokens.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace promptcache::jinja {

enum class TokenType {
  kData,        // template text outside tags
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // value: the decoded literal
  kInteger,
  kFloat,
  kOperator,  // value: its spelling ("+", "//", "(", ...)
  kEof,
};

struct Token {
  TokenType type;
  std::string value;
  int64_t integer = 0;
  double number = 0;
  int line = 1;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// The tokens of `source`, ending with kEof. InvalidArgument ("line 3: unexpected char '$'") for
// an unterminated comment, raw block or string, an unbalanced bracket or an unknown character.
Result<std::vector<Token>> Tokenize(std::string_view source, const LexOptions& options = {});

}  // namespace promptcache::jinja
