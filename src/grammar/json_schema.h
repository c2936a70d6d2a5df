// JSON Schema to GBNF (grammar.h), for structured output: what OpenAI's strict mode accepts
// (objects with properties, required and additionalProperties: false; arrays with items;
// string, number, integer, boolean and null; enum, const, anyOf; $defs / definitions with local
// $ref, recursion included), plus minLength/maxLength and minItems/maxItems. Any other keyword
// that constrains values (pattern, format, minimum, oneOf, allOf, ...) is refused with an error
// naming it, never ignored; annotations (title, description, default, examples, $schema, $id)
// are accepted.
//
// The generated text is compact JSON with optional small whitespace; object properties come in
// the schema's order (optional ones may be left out); numbers have bounded digits so that a
// generation always can end.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace promptcache {

// Schemas nested deeper than this (properties in properties, items in items, anyOf, $ref
// chains) are refused with a message naming where; their JSON text is also refused, before it
// is parsed, when it nests deeper than kMaxJsonNesting (json_depth.h) brackets.
inline constexpr int kMaxSchemaDepth = 64;

// The GBNF text of a grammar for the JSON text of `schema` (a JSON Schema, as JSON text).
// InvalidArgument names the unsupported keyword and where it is ("properties.a.pattern").
Result<std::string> JsonSchemaToGbnf(std::string_view schema);

// For several schemas in one grammar (a forced tool call picks one of several tools' parameters):
// the rules of `schema` alone, named `prefix` and a number (prefix: letters, not one of the shared
// rules' names), and in *top the expression that matches the schema's JSON. They refer to the
// shared rules (string, value, ws, ...) that JsonSharedGbnf() gives, once per grammar.
Result<std::string> JsonSchemaRules(std::string_view schema, const std::string& prefix,
                                    std::string* top);
std::string JsonSharedGbnf();

// Any JSON object (response_format {"type": "json_object"}).
std::string JsonObjectGbnf();

}  // namespace promptcache
