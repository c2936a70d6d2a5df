// The modular extension of OpenAI's requests: "schema" and "modules" (with arguments and nested
// modules), "positions", "recompute", "evaluate", or a PML prompt given as the prompt.
#include <nlohmann/json.hpp>

#include "server/openai_request_parts.h"

namespace promptcache::openai_request {
namespace {

// Module nesting deeper than this in "modules" is refused (schemas are rarely more than a few
// levels deep; the bound keeps the recursion below shallow for any input).
constexpr int kMaxModuleDepth = 16;

// One "modules" item: "name", or {"name": ..., "args": {param: value}, "modules": [...]}.
MaybeError ReadModuleRef(const json& v, const std::string& param, int depth, PmlModuleRef* out) {
  if (v.is_string()) {
    out->name = v.get<std::string>();
  } else if (v.is_object()) {
    for (const auto& [key, value] : v.items()) {
      if (key != "name" && key != "args" && key != "modules") {
        return ApiError::BadRequest(
            "'" + param + "' has an unknown field '" + key + "' (expected name, args, modules)",
            param + "." + key);
      }
    }
    const json* name = Find(v, "name");
    if (name == nullptr) return ApiError::BadRequest("'" + param + ".name' is required", param);
    if (!name->is_string()) return WrongType(param + ".name", "a string", *name);
    out->name = name->get<std::string>();
    if (const json* args = Find(v, "args")) {
      if (!args->is_object()) return WrongType(param + ".args", "an object", *args);
      for (const auto& [key, value] : args->items()) {
        if (!value.is_string()) return WrongType(param + ".args." + key, "a string", value);
        out->arguments.emplace_back(key, value.get<std::string>());
      }
    }
    if (const json* children = Find(v, "modules")) {
      if (!children->is_array()) return WrongType(param + ".modules", "an array", *children);
      if (depth + 1 >= kMaxModuleDepth) {
        return ApiError::BadRequest("'" + param + "' nests modules too deeply", param);
      }
      for (size_t i = 0; i < children->size(); ++i) {
        PmlModuleRef child;
        PC_RETURN_IF_API_ERROR(ReadModuleRef(
            (*children)[i], param + ".modules[" + std::to_string(i) + "]", depth + 1, &child));
        out->children.push_back(std::move(child));
      }
    }
  } else {
    return WrongType(param, "a module name or an object", v);
  }
  if (out->name.empty()) return ApiError::BadRequest("'" + param + "' names no module", param);
  return std::nullopt;
}

}  // namespace

// The modular extension: "schema" and "modules", or a PML prompt string. Cache pinning is for
// plain prompts: a loaded schema's modules stay cached anyway.

namespace {

// "schema", and "modules" (which need it).
MaybeError ReadSchemaAndModules(const json& obj, ApiRequest* out) {
  if (const json* schema = Find(obj, "schema")) {
    if (!schema->is_string()) return WrongType("schema", "a string (a schema's name)", *schema);
    if (schema->get<std::string>().empty()) {
      return ApiError::BadRequest("'schema' must name a loaded schema", "schema");
    }
    out->schema = schema->get<std::string>();
  }
  if (const json* modules = Find(obj, "modules")) {
    if (out->schema.empty()) {
      return ApiError::BadRequest("'modules' needs a 'schema' naming the schema they belong to",
                                  "modules");
    }
    if (!modules->is_array()) return WrongType("modules", "an array", *modules);
    for (size_t i = 0; i < modules->size(); ++i) {
      PmlModuleRef ref;
      PC_RETURN_IF_API_ERROR(
          ReadModuleRef((*modules)[i], "modules[" + std::to_string(i) + "]", 0, &ref));
      out->modules.push_back(std::move(ref));
    }
  }
  return std::nullopt;
}

// How the cached tokens are reused: "positions", "evaluate", "cache_segments", "recompute".
MaybeError ReadReuseFields(const json& obj, ApiRequest* out) {
  if (const json* positions = Find(obj, "positions")) {
    if (!positions->is_string()) {
      return WrongType("positions", "a string (\"schema\" or \"contiguous\")", *positions);
    }
    Result<PmlPositions> p = ParsePmlPositions(positions->get<std::string>());
    if (!p.ok()) return ApiError::BadRequest("'positions': " + p.status().message(), "positions");
    out->positions = *p;
  }
  PC_RETURN_IF_API_ERROR(ReadBool(obj, "evaluate", &out->evaluate));
  if (Find(obj, "cache_segments") != nullptr) {
    bool on = false;
    PC_RETURN_IF_API_ERROR(ReadBool(obj, "cache_segments", &on));
    out->cache_segments = on;
  }
  if (const json* recompute = Find(obj, "recompute")) {
    if (!recompute->is_number() || !(recompute->get<double>() >= 0) ||
        !(recompute->get<double>() <= 1)) {
      return ApiError::BadRequest("'recompute' must be a share from 0 to 1", "recompute");
    }
    out->recompute = recompute->get<double>();
  }
  return std::nullopt;
}

// A plain prompt: the modular fields it may not carry.
MaybeError CheckPlainFields(const ApiRequest& r) {
  // "recompute" and "evaluate" apply to segments too: refused here only when the request
  // turns them off, else once the server's default is known (CheckSegmentFields).
  const bool segments_off = r.cache_segments == false;
  const char* field = r.positions != PmlPositions::kDefault ? "positions"
                      : r.recompute >= 0 && segments_off    ? "recompute"
                      : r.evaluate && segments_off          ? "evaluate"
                                                            : nullptr;
  if (field == nullptr && r.evaluate && r.stream) {
    return ApiError::BadRequest("'evaluate' needs a non-streamed request", "evaluate");
  }
  if (field != nullptr) {
    return ApiError::BadRequest(
        "'" + std::string(field) + "' applies to modular prompts (a 'schema' or a PML prompt)",
        field);
  }
  return std::nullopt;
}

// A modular prompt: the plain prompts' fields it may not carry.
MaybeError CheckModularFields(const ApiRequest& r) {
  if (r.pin) {
    return ApiError::BadRequest(
        "'cache.pin' applies to plain prompts; a modular prompt's modules stay cached while "
        "their schema is loaded",
        "cache", "unsupported");
  }
  if (r.echo || r.n > 1 || r.logprobs >= 0) {
    const char* field = r.echo ? "echo" : r.n > 1 ? "n" : "logprobs";
    return ApiError::BadRequest(
        "'" + std::string(field) + "' applies to plain prompts, not modular ones", field,
        "unsupported");
  }
  if (r.evaluate && r.stream) {
    return ApiError::BadRequest("'evaluate' needs a non-streamed request", "evaluate");
  }
  for (size_t i = 0; i < r.messages.size(); ++i) {
    if (r.messages[i].cache_breakpoint) {
      return ApiError::BadRequest(
          "cache_control applies to plain prompts, not to a schema's messages",
          "messages[" + std::to_string(i) + "].cache_control", "unsupported");
    }
  }
  return std::nullopt;
}

}  // namespace

MaybeError ReadModular(const json& obj, ApiRequest* out) {
  bool detect_pml = true;
  PC_RETURN_IF_API_ERROR(ReadBool(obj, "pml", &detect_pml));
  PC_RETURN_IF_API_ERROR(ReadSchemaAndModules(obj, out));
  PC_RETURN_IF_API_ERROR(ReadReuseFields(obj, out));
  if (out->kind == ApiKind::kCompletion) {
    if (!out->schema.empty() && out->prompt_is_tokens) {
      return ApiError::BadRequest(
          "with a 'schema', the prompt is the new text after the modules: a string, not token ids",
          "prompt");
    }
    out->pml_xml = out->schema.empty() && !out->prompt_is_tokens && detect_pml &&
                   LooksLikePml(out->prompt_text);
  }
  return out->modular() ? CheckModularFields(*out) : CheckPlainFields(*out);
}

}  // namespace promptcache::openai_request

namespace promptcache {

std::optional<ApiError> CheckSegmentFields(const ApiRequest& request, bool segments) {
  if (request.modular() || segments) return std::nullopt;
  const char* field = request.recompute >= 0 ? "recompute"
                      : request.evaluate     ? "evaluate"
                                             : nullptr;
  if (field == nullptr) return std::nullopt;
  return ApiError::BadRequest("'" + std::string(field) +
                                  "' applies to modular prompts (a 'schema' or a PML prompt) and "
                                  "to prompts with segments (\"cache_segments\": true)",
                              field);
}

}  // namespace promptcache
