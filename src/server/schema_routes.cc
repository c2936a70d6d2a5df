// /v1/schemas: the engine's PML schemas listed, loaded from a request's text (admin only with
// --api-keys), shown with their layout, and dropped. The bodies are server/schema_api.h's.
#include "server/routes.h"
#include "server/schema_api.h"

namespace promptcache {
namespace {

void SendSchema(Call& call, const SchemaInfo& info) {
  // A DELETE between the two engine calls leaves no layout: the schema is gone (404).
  Result<std::shared_ptr<const SchemaLayout>> layout = call.engine().GetSchemaLayout(info.name);
  if (!layout.ok()) return call.Fail(layout.status(), "name");
  call.Send(SchemaBody(info, **layout));
}

}  // namespace

// Schema text from a client may not name files (src attributes): it could read the server's.
void HandleSchemaLoad(Call& call) {
  std::string xml;
  if (std::optional<ApiError> err = ParseSchemaBody(call.req.body, &xml)) return call.Fail(*err);
  SchemaLoadOptions o;
  o.allow_src = false;
  Result<SchemaInfo> info = call.engine().LoadSchemaText(xml, "request", o);
  if (!info.ok()) return call.Fail(info.status(), "schema");
  SendSchema(call, *info);
}

void HandleSchemaList(Call& call) { call.Send(SchemaListBody(call.engine().ListSchemas())); }

void HandleSchemaGet(Call& call) {
  Result<SchemaInfo> info = call.engine().GetSchema(call.PathParam());
  if (!info.ok()) return call.Fail(info.status(), "name");
  SendSchema(call, *info);
}

void HandleSchemaDrop(Call& call) {
  const std::string name = call.PathParam();
  if (Status st = call.engine().DropSchema(name); !st.ok()) return call.Fail(st, "name");
  call.Send(SchemaDeletedBody(name));
}

}  // namespace promptcache
