// Parts of the OpenAI request parser (server/openai_request.cc) kept in files of their own:
// the sampling fields (sampling_request.cc), the structured-output fields
// (structured_output_request.cc) and the modular extension (modular_request.cc). Server-internal;
// each reads its fields of the parsed body into `out` and returns the ApiError naming the first bad
// one.
#pragma once

#include "server/json_fields.h"
#include "server/openai_request.h"

namespace promptcache::openai_request {

// The field readers these parts use (server/json_fields.h).
using json_fields::Find;
using json_fields::json;
using json_fields::MaybeError;
using json_fields::ReadBool;
using json_fields::WrongType;

// The sampling fields into *s, OpenAI's defaults for the rest (temperature 1, top_p 1, no
// top-k or min-p); logit_bias ids are checked against the vocabulary later (CheckLogitBias).
MaybeError ReadSampling(const json& obj, SamplingParams* s);
// llama-server's dry_sequence_breakers: strings, tokenized by the route (DryBreakerSequences).
MaybeError ReadDryBreakers(const json& obj, std::vector<std::string>* out);

// At most one of response_format (json_object / json_schema), grammar, json_schema,
// guided_json and guided_choice, compiled into out->grammar. `ordered`: the body with its keys
// in order (null: none), whose schemas are compiled in the client's property order.
MaybeError ReadStructuredOutput(const json& obj, const nlohmann::ordered_json* ordered,
                                ApiRequest* out);

// "schema" and "modules", or a PML prompt string, and the fields only modular prompts take;
// read after every other field (it checks them against the modular prompt).
MaybeError ReadModular(const json& obj, ApiRequest* out);

// Chat: reasoning_format, chat_template_kwargs and reasoning_effort (reasoning_request.cc).
MaybeError ReadReasoningFields(const json& obj, ApiRequest* out);

// Chat: OpenAI's `prediction` ({"type": "content", "content": text or text parts}), at most
// kMaxPredictionBytes, into out->prediction (prediction_request.cc).
MaybeError ReadPrediction(const json& obj, ApiRequest* out);

// chat_template_kwargs (or another route's template variables, named `param`): an object of at
// most kMaxTemplateKwargs variables and kMaxTemplateKwargsBytes of JSON, none of them one the
// server sets (messages, tools, add_generation_prompt, bos_token, eos_token, raise_exception,
// strftime_now).
MaybeError ReadTemplateKwargs(const json& v, const std::string& param, nlohmann::ordered_json* out);

}  // namespace promptcache::openai_request
