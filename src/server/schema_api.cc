#include "server/schema_api.h"

#include <nlohmann/json.hpp>

#include "server/json_fields.h"

namespace promptcache {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

ojson NameOrNull(const SchemaLayout& layout, int module) {
  return module >= 0 ? ojson(layout.modules[module].name) : ojson();
}

ojson Names(const SchemaLayout& layout, const std::vector<int>& modules) {
  ojson out = ojson::array();
  for (int m : modules) out.push_back(layout.modules[m].name);
  return out;
}

// What a module's text attends to when encoded: contiguous pieces of one owner merged into one
// range; "module": null is the always-included text.
ojson AttendsTo(const SchemaLayout& layout, const PmlModule& m) {
  ojson out = ojson::array();
  int owner = 0, start = 0, end = 0;
  bool open = false;
  auto flush = [&] {
    if (open)
      out.push_back({{"module", NameOrNull(layout, owner)}, {"start", start}, {"end", end}});
  };
  for (const PmlTextRef& ref : m.span) {
    const PmlTextPiece& p = layout.Piece(ref);
    if (open && ref.module == owner && p.start == end) {
      end = p.end();
      continue;
    }
    flush();
    owner = ref.module;
    start = p.start;
    end = p.end();
    open = true;
  }
  flush();
  return out;
}

ojson ModuleJson(const SchemaLayout& layout, int index) {
  const PmlModule& m = layout.modules[index];
  ojson j;
  j["name"] = m.name;
  j["start"] = m.start;
  j["end"] = m.end();
  j["length"] = m.length;
  j["tokens"] = m.token_count;
  j["cached"] = m.cached;
  j["parent"] = NameOrNull(layout, m.parent);
  j["union"] = m.union_index >= 0 ? ojson(m.union_index) : ojson();
  j["union_default"] = m.union_index >= 0 && layout.unions[m.union_index].default_member == index;
  j["scaffold"] = m.scaffold_index >= 0 ? ojson(m.scaffold_index) : ojson();
  j["fixed_length"] = m.fixed_length;
  j["required"] = m.required;
  j["requires"] = Names(layout, m.requires_modules);
  j["excludes"] = Names(layout, m.excludes_modules);
  ojson params = ojson::array();
  for (const PmlParameter& p : m.parameters) {
    params.push_back({{"name", p.name},
                      {"start", p.start},
                      {"length", p.length},
                      {"default", p.scaffold ? ojson(*p.scaffold) : ojson()}});
  }
  j["parameters"] = std::move(params);
  j["modules"] = Names(layout, m.children);
  j["attends_to"] = AttendsTo(layout, m);
  return j;
}

// The fields of the list and of the full body.
ojson Summary(const SchemaInfo& info) {
  ojson j;
  j["object"] = "schema";
  j["name"] = info.name;
  j["file"] = info.file;
  j["total_length"] = info.total_length;
  j["module_count"] = info.modules;
  j["cached_modules"] = info.cached_modules;
  j["cached_tokens"] = info.cached_tokens;
  j["persisted"] = info.persisted;
  return j;
}

}  // namespace

std::optional<ApiError> ParseSchemaBody(std::string_view body, std::string* xml) {
  const size_t first = body.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) {
    return ApiError::BadRequest(
        "the body must be a PML schema: <schema name=\"...\">...</schema>, or JSON "
        "{\"schema\": \"<schema ...>\"}",
        "schema");
  }
  if (body[first] != '{') {
    *xml = std::string(body);
    return std::nullopt;
  }
  if (std::optional<ApiError> e = json_fields::CheckNesting(body)) return e;
  json obj;
  try {
    obj = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    return ApiError::BadRequest(std::string("the request body is not valid JSON: ") + e.what());
  }
  auto it = obj.find("schema");
  if (it == obj.end() || !it->is_string()) {
    return ApiError::BadRequest("'schema' must be a string holding the PML schema text", "schema");
  }
  for (const auto& [key, value] : obj.items()) {
    if (key != "schema") {
      return ApiError::BadRequest("unknown field '" + key + "' (expected only 'schema')", key);
    }
  }
  *xml = it->get<std::string>();
  return std::nullopt;
}

std::string SchemaBody(const SchemaInfo& info, const SchemaLayout& layout) {
  ojson j = Summary(info);
  j["context_length"] = layout.context_length;
  ojson always = ojson::array();
  int always_tokens = 0;
  for (const PmlTextPiece& p : layout.always) {
    always.push_back({{"start", p.start}, {"end", p.end()}});
    always_tokens += static_cast<int>(p.tokens.size());
  }
  j["always"] = {{"tokens", always_tokens}, {"ranges", std::move(always)}};
  ojson modules = ojson::array();
  for (int i = 0; i < static_cast<int>(layout.modules.size()); ++i) {
    modules.push_back(ModuleJson(layout, i));
  }
  j["modules"] = std::move(modules);
  ojson unions = ojson::array();
  for (const PmlUnion& u : layout.unions) {
    unions.push_back({{"start", u.start},
                      {"length", u.length},
                      {"parent", NameOrNull(layout, u.parent)},
                      {"members", Names(layout, u.members)},
                      {"default", NameOrNull(layout, u.default_member)}});
  }
  j["unions"] = std::move(unions);
  ojson scaffolds = ojson::array();
  for (const PmlScaffold& s : layout.scaffolds) {
    scaffolds.push_back(
        {{"parent", NameOrNull(layout, s.parent)}, {"members", Names(layout, s.members)}});
  }
  j["scaffolds"] = std::move(scaffolds);
  // What the load that registered it did: tokens encoded now, tokens found cached (RAM or disk).
  j["load"] = {{"encoded_tokens", info.encoded_tokens},
               {"reused_tokens", info.reused_tokens},
               {"encode_ms", info.encode_ms}};
  j["layout"] = info.layout;
  return Dump(j);
}

std::string SchemaListBody(const std::vector<SchemaInfo>& schemas) {
  ojson data = ojson::array();
  for (const SchemaInfo& info : schemas) data.push_back(Summary(info));
  return Dump(ojson{{"object", "list"}, {"data", std::move(data)}});
}

std::string SchemaDeletedBody(const std::string& name) {
  return Dump(ojson{{"object", "schema"}, {"name", name}, {"deleted", true}});
}

Result<PmlPrompt> ModularPrompt(const ApiRequest& request) {
  if (request.pml_xml) {
    PC_ASSIGN_OR_RETURN(PmlPrompt p, ParsePrompt(request.prompt_text, "prompt"));
    if (request.positions != PmlPositions::kDefault) p.positions = request.positions;
    if (request.recompute >= 0) p.recompute = request.recompute;
    return p;
  }
  PmlPrompt p;
  p.positions = request.positions;
  p.recompute = request.recompute;
  p.file = "request";
  p.schema = request.schema;
  p.modules = request.modules;
  if (request.kind == ApiKind::kChat) {
    for (const ApiMessage& m : request.messages) p.text.push_back({m.role, m.content, {}});
  } else if (!request.prompt_text.empty()) {
    p.text.push_back({"", request.prompt_text, {}});
  }
  return p;
}

}  // namespace promptcache
