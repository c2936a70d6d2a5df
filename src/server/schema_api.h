// The server's side of the modular prompt cache (docs/modules.md): the bodies of the schema
// endpoints (POST/GET/DELETE /v1/schemas) and the PmlPrompt a modular completion request stands
// for. Pure functions of engine data, so that each JSON shape is unit-tested without a server.
//
// A schema's JSON is its layout as a client needs it to write prompts: every module's reserved
// range, token count, whether it is precomputed, its parameters and what it attends to, plus the
// unions and scaffolds, what its load encoded or found cached, and the text `promptcache schema
// show` prints.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "pml/pml.h"
#include "promptcache/engine.h"
#include "server/openai_request.h"

namespace promptcache {

// POST /v1/schemas: the schema's XML, sent raw (any content type) or as JSON
// {"schema": "<schema ...>"}. Returns the error to send, or nullopt with *xml set.
std::optional<ApiError> ParseSchemaBody(std::string_view body, std::string* xml);

// A loaded schema: {"object": "schema", "name", ..., "modules": [...], "layout": "..."}.
std::string SchemaBody(const SchemaInfo& info, const SchemaLayout& layout);

// GET /v1/schemas: {"object": "list", "data": [summaries]}.
std::string SchemaListBody(const std::vector<SchemaInfo>& schemas);

// DELETE /v1/schemas/{name}: {"object": "schema", "name", "deleted": true}.
std::string SchemaDeletedBody(const std::string& name);

// The PML prompt of a modular request (request.modular()): the parsed `<prompt>` XML (named
// "prompt" in messages), or the schema and module picks of the JSON form with the messages
// (chat turns) or the prompt string (plain text) as the new text (named "request").
Result<PmlPrompt> ModularPrompt(const ApiRequest& request);

}  // namespace promptcache
