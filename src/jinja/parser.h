// The Jinja parser: tokens to a syntax tree, with Jinja2's grammar (operator precedence, filters
// and tests binding tighter than arithmetic, `x if c else y`, tuples, slices, keyword arguments)
// and its statements: if/elif/else, for (with `if`, else, loop controls), set (also as a block
// and on namespace attributes), macro, call, filter, with, print, and transformers' generation
// block. Tags that need other template files (extends, include, import, block) are refused.
//
// The source is untrusted (it comes from a model file or a user): nesting is bounded, so parsing
// and everything after it run in bounded stack, and every error is one line with the line number.
#pragma once

#include <string_view>

#include "core/status.h"
#include "jinja/ast.h"

namespace promptcache::jinja {

// How deep statements and parenthesized expressions may nest in the source, and how deep an
// expression tree may grow (a long chain a + b + c + ... nests without parentheses).
constexpr int kMaxParseDepth = 200;
constexpr int kMaxExprDepth = 200;

Result<Body> Parse(std::string_view source);

}  // namespace promptcache::jinja
