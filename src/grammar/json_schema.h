// JSON Schema to GBNF (grammar.h), for structured output (response_format, json_schema,
// guided_json, tool parameters): the grammar accepts JSON valid against the schema, as OpenAI's
// structured outputs and the clients that write schemas (zod, pydantic) use JSON Schema.
//
// Compiled: type (one or a list), enum, const, anyOf, oneOf (where its branches cannot overlap:
// different types, different literals, or a property both require with disjoint schemas, as in
// a discriminated union; otherwise refused), allOf (the members hold together: keywords side by
// side combine exactly, objects' properties merge), $ref to any local JSON pointer (#, #/$defs/x,
// #/definitions/x, percent-escaped names), recursion included, also beside other keywords;
// objects: properties, required (optional properties may be left out; they come in the schema's
// order), additionalProperties (false; true or a schema: more properties after the listed ones,
// named anything but them; absent: only the listed ones are generated), propertyNames (string
// keywords); arrays: items, prefixItems (and draft 7's items array with additionalItems),
// items: false, minItems/maxItems (up to 1000); strings: minLength/maxLength (code points, up to
// 1000), pattern (ECMAScript, unanchored: regex_nfa.h), format (date-time, date, time, duration,
// email, hostname, ipv4, ipv6, uuid, uri: json_formats.cc), all of them together (the product of
// their automata; one too large to enforce is refused); numbers and integers: minimum, maximum,
// exclusiveMinimum, exclusiveMaximum (numbers or draft 4's booleans), exact at any magnitude
// (json_number.h). Any other keyword that constrains values (multipleOf, not, if/then/else,
// minProperties, patternProperties, contains, uniqueItems: true, unevaluated*, dependent*) is
// refused with an error naming it and where it is ("properties.a.multipleOf"), never ignored;
// annotations (title, description, default, examples, $schema, $id, $comment, $anchor,
// deprecated, readOnly, writeOnly, discriminator, strict) are accepted.
//
// The generated text is JSON with optional small whitespace; strings write characters raw,
// except the ones JSON must escape; numbers have bounded digits, so that a generation always can
// end.
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
