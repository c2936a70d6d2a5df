// The builder behind ParseSchema: one depth-first walk over the XML that tokenizes text runs and
// assigns positions (pml_schema.cc), then passes that resolve requires/excludes, check the context,
// and compute attention spans and content keys (pml_schema_layout.cc). Not part of the public API.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <pugixml.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "pml/pml.h"
#include "pml/pml_internal.h"

namespace promptcache::pml_internal {

class SchemaBuilder {
 public:
  SchemaBuilder(const XmlSource& xml, const PmlTextEncoder& encoder, std::string base_dir)
      : xml_(xml), enc_(encoder), base_dir_(std::move(base_dir)) {}

  Result<SchemaLayout> Build();

 private:
  // Where the walk is: whose text is being collected, and whether inside a role tag.
  struct Context {
    int owner = kPmlAlways;
    bool in_role = false;
    int depth = 0;
  };
  // requires/excludes names, resolved once every module is known.
  struct PendingRefs {
    std::vector<std::string> requires_names;
    std::vector<std::string> excludes_names;
  };

  Status Error(const pugi::xml_node& node, const std::string& what,
               StatusCode code = StatusCode::kInvalidArgument) const;
  Status ErrorAt(const PmlSourcePos& pos, const std::string& what,
                 StatusCode code = StatusCode::kInvalidArgument) const;
  Status CheckAttributes(const pugi::xml_node& node, std::initializer_list<const char*> allowed,
                         const std::string& what) const;
  Result<int> ParseLength(const pugi::xml_node& node, const char* value,
                          const std::string& what) const;
  Result<bool> ParseBool(const pugi::xml_node& node, const char* attr,
                         const std::string& what) const;
  Status CheckDepth(const pugi::xml_node& node, int depth) const;
  Status Advance(const pugi::xml_node& node, int64_t n);

  Status WalkContent(const pugi::xml_node& parent, const Context& ctx);
  Status AddModule(const pugi::xml_node& node, const Context& ctx, int union_index,
                   int scaffold_index);
  Status ModuleBody(const pugi::xml_node& node, int index, const Context& ctx);
  Status AddMembers(const pugi::xml_node& node, const Context& ctx, const char* group,
                    const std::function<Status(const pugi::xml_node&, const Context&)>& add_member);
  Status AddUnion(const pugi::xml_node& node, const Context& ctx);
  Status AddScaffold(const pugi::xml_node& node, const Context& ctx);
  Status AddParameter(const pugi::xml_node& node, const Context& ctx);
  Status Flush(int owner);
  Status ResolveReferences();
  Status CheckContext() const;
  Status ComputeSpans();
  void ComputeKeys();

  const XmlSource& xml_;
  const PmlTextEncoder& enc_;
  std::string base_dir_;
  SchemaLayout out_;
  int64_t pos_ = 0;
  std::string pending_;  // text of the current run, not yet tokenized
  bool bos_pending_ = false;
  std::unordered_map<std::string, int> module_index_;
  std::vector<PendingRefs> refs_;  // per module
};

}  // namespace promptcache::pml_internal
