// Parts of the Messages request parser (server/anthropic_request.cc) kept in a file of their own:
// extended thinking and output_config (anthropic_thinking.cc) and document blocks
// (anthropic_document.cc).
// Server-internal; each reads its part of the parsed
// body into the request and returns the ApiError naming the first bad field.
#pragma once

#include <string>

#include "server/anthropic_request.h"
#include "server/json_fields.h"

namespace promptcache::anthropic_request {

// The field readers these parts use (server/json_fields.h).
using json_fields::Find;
using json_fields::json;
using json_fields::MaybeError;
using json_fields::OnlyKeys;
using json_fields::Unsupported;
using json_fields::WrongType;

// The request's `thinking`: enabled (with budget_tokens, at least 1024 and, with
// `check_budget`, below max_tokens), adaptive (display "summarized") or disabled.
json_fields::MaybeError ReadThinking(const json_fields::json& obj, AnthropicRequest* out,
                                     bool check_budget);

// The request's `output_config`: `effort` (Anthropic's levels: low, medium, high, xhigh, max)
// and `format` ({"type": "json_schema", "schema"}, compiled to a grammar; not with
// `for_count`, where only the effort changes the prompt). `ordered`: the body parsed keeping the
// client's key order (null where not parsed), so that properties are generated in the schema's
// order (zod's), not sorted.
json_fields::MaybeError ReadOutputConfig(const json_fields::json& obj,
                                         const nlohmann::ordered_json& ordered,
                                         AnthropicRequest* out, bool for_count);

// An assistant's thinking (or redacted_thinking) block `block`, at `param`, into msg.
json_fields::MaybeError ReadThinkingBlock(const json_fields::json& block, const std::string& param,
                                          ApiMessage* msg);

// A user's document block `block` (a text or content source), at `param`, rendered and appended
// to *out:
//   <document>\n<source>TITLE</source>\n<document_context>CONTEXT</document_context>\n
//   <document_content>\nTEXT\n</document_content>\n</document>\n
// (the source and context lines only when given; a content source's text blocks one per line).
// citations.enabled true is refused: no citation blocks are answered.
json_fields::MaybeError ReadDocumentBlock(const json_fields::json& block, const std::string& param,
                                          std::string* out);

}  // namespace promptcache::anthropic_request
