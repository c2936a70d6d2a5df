// Schemas registered with the engine: what the registry keeps for each, and how a schema is
// persisted under the engine's cache folder so that a restarted engine loads it again.
//
// Layout on disk: CACHE_DIR/schemas/NAME/schema.xml holds the schema text as given, and each src
// file the schema reads lies beside it under its src path, so loading schema.xml finds them as
// the original did. The module K/V themselves live in the block cache's disk tier, found again
// by content key.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "pml/pml.h"
#include "promptcache/engine.h"

namespace promptcache {

struct SchemaEntry {
  SchemaLayout layout;
  SchemaLayout contiguous;  // ContiguousLayout(layout): what the contiguous mode encodes
  // The layout a prompt served in `positions` (kSchema or kContiguous) gathers from.
  const SchemaLayout& For(PmlPositions positions) const {
    return positions == PmlPositions::kContiguous ? contiguous : layout;
  }
  std::string xml;       // the schema text
  std::string base_dir;  // the folder src paths are relative to
  SchemaInfo info;
};

// Refuses schema text with src="..." attributes, naming the first module that has one (for
// schemas from remote clients). Malformed XML passes: the parser reports it.
Status CheckNoSrc(std::string_view xml, const std::string& path);

// Writes the schema and its src files under cache_dir/schemas/NAME/, replacing what was there.
Status PersistSchema(const std::string& cache_dir, const SchemaEntry& entry);
// Deletes cache_dir/schemas/NAME/ (nothing to delete is fine).
Status RemovePersistedSchema(const std::string& cache_dir, const std::string& name);
// The schema.xml files under cache_dir/schemas/, sorted.
std::vector<std::string> PersistedSchemaFiles(const std::string& cache_dir);

// The summary numbers of a layout (no encoding counts).
SchemaInfo DescribeSchema(const SchemaLayout& layout);

}  // namespace promptcache
