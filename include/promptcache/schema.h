// Modular prompts through the Engine (docs/modules.md): how a PML schema is loaded
// (SchemaLoadOptions) and what a loaded one summarizes (SchemaInfo), a modular prompt's tokens
// as its schema lays them out (ExpandedPrompt), and PromptBuilder, which builds a PmlPrompt in
// C++ instead of XML. The PML types themselves are promptcache/pml.h's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "promptcache/pml.h"

namespace promptcache {

// How Engine::LoadSchemaFile / LoadSchemaText load a PML schema.
struct SchemaLoadOptions {
  // Called on the loading thread after each encoded piece: tokens done and to do.
  std::function<void(int done, int total)> on_progress;
  // With a cache_dir: keep the schema (and its src files) under cache_dir/schemas/NAME/, so an
  // engine created on that folder later loads it again.
  bool persist = true;
  // false: refuse src="..." attributes (schema text from a remote client must not read files).
  bool allow_src = true;
  // false: register without encoding; prompts encode the modules they miss (and count them as
  // computed). What `promptcache prompt --schema` does, to show the cost of a cold cache.
  bool encode = true;
};

// A loaded schema's summary (Engine::LoadSchemaFile, ListSchemas, GetSchema).
struct SchemaInfo {
  std::string name;
  std::string file;      // the path it was read from, or the name given with its text
  int total_length = 0;  // positions the schema reserves; a prompt's new text starts here
  int modules = 0;
  int cached_modules = 0;  // modules precomputed (not cache="false")
  int cached_tokens = 0;   // tokens of the always-included text and the cached modules
  int encoded_tokens = 0;  // encoded by this load
  int reused_tokens = 0;   // found in the cache (RAM, disk or the remote tier) by this load
  double encode_ms = 0;
  bool persisted = false;  // kept under cache_dir/schemas/
  std::string layout;      // FormatLayout: each module's range, tokens and span
};

// A modular prompt's tokens as the schema lays them out.
struct ExpandedPrompt {
  std::vector<int32_t> tokens;     // every token the prompt includes, by position
  std::vector<int32_t> positions;  // their positions (gaps where modules are left out)
  int cached_tokens = 0;           // of them, tokens of cached modules and always-included text
  int end = 0;                     // where generation continues
};

// Builds a PmlPrompt in C++ instead of XML:
//   PromptBuilder("support").Module("doc-fr").Argument("greeting", "name", "Ana")
//       .Turn("user", "Comment ...?").prompt()
class PromptBuilder {
 public:
  explicit PromptBuilder(std::string schema);
  // Includes a module; "parent/child" names a nested module (its parents are included too).
  PromptBuilder& Module(std::string_view path);
  // Fills a parameter of a module, including the module.
  PromptBuilder& Argument(std::string_view path, std::string parameter, std::string value);
  // New text after the modules: plain, or one chat turn ("system", "user" or "assistant").
  PromptBuilder& Text(std::string text);
  PromptBuilder& Turn(std::string role, std::string text);
  const PmlPrompt& prompt() const { return prompt_; }

 private:
  PmlModuleRef* Find(std::string_view path);
  PmlPrompt prompt_;
};

}  // namespace promptcache
