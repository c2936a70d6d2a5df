// PML, the prompt markup language of Prompt Cache (Gim et al., MLSys 2024), as the public API
// sees it: the parsed form of a prompt (PmlPrompt, which Engine::SubmitPrompt takes and
// PromptBuilder in promptcache/schema.h builds) and the layout of a loaded schema
// (SchemaLayout, from Engine::GetSchemaLayout). The language itself is described in
// docs/modules.md.
//
// A schema declares reusable prompt modules at fixed positions; the engine precomputes each
// module's attention states (K/V) once at those positions, and serves a prompt by gathering the
// cached states of the modules it picks and computing only what is new (parameter arguments,
// cache="false" modules, the prompt's text). These types are plain data; positions are token
// positions, token ids the model's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "promptcache/status.h"

namespace promptcache {

// A place in an XML file, 1-based (column in UTF-8 characters); 0 when unknown.
struct PmlSourcePos {
  int line = 0;
  int column = 0;
};

// A maximal run of text of one owner (the always-included text or one module), tokenized as a
// whole, at consecutive positions. Role headers and end markers are part of the run they touch.
struct PmlTextPiece {
  int start = 0;
  // Its start in the schema's own layout, where a derived (contiguous) layout moved it; -1:
  // `start`.
  int reserved_start = -1;
  std::vector<int32_t> tokens;
  // Content key (32 hex digits): a hash of the tokens, their positions and the keys of every
  // piece they attend to (the owner's span and its earlier pieces), so it changes exactly when
  // this piece's K/V would. Does not include the model: combine with its fingerprint.
  std::string key;
  int end() const { return start + static_cast<int>(tokens.size()); }
  int ReservedStart() const { return reserved_start >= 0 ? reserved_start : start; }
};

// The owner value of the schema's always-included text in a PmlTextRef.
inline constexpr int kPmlAlways = -1;

// One text piece of a schema: SchemaLayout::Piece(ref) is the piece.
struct PmlTextRef {
  int module = kPmlAlways;  // module index, or kPmlAlways for the always-included text
  int piece = 0;            // index into that owner's pieces (`always` or the module's `texts`)
  bool operator==(const PmlTextRef&) const = default;
};

// A `<parameter>`: `length` positions inside its module, filled per prompt, never cached.
struct PmlParameter {
  std::string name;  // unique among its module's parameters
  PmlSourcePos pos;
  int start = 0;
  int length = 0;
  std::optional<std::string> scaffold;   // default argument, used when a prompt gives none
  std::vector<int32_t> scaffold_tokens;  // its tokens (at most `length`)
  int end() const { return start + length; }
};

// A `<module>`. Modules are numbered depth first in document order, so a module's ancestors and
// the earlier members of its scaffold have smaller indices, and by position order among the
// modules a prompt can include together.
struct PmlModule {
  std::string name;  // unique in the schema
  PmlSourcePos pos;
  std::string src;          // the src attribute as written ("" for inline text)
  int parent = -1;          // enclosing module, -1 at the top level
  int union_index = -1;     // SchemaLayout::unions index if a union member, else -1
  int scaffold_index = -1;  // SchemaLayout::scaffolds index if directly in a <scaffold>, else -1
  int start = 0;
  int length = 0;             // reserved positions [start, start + length)
  bool fixed_length = false;  // length="N" was given (length == N)
  int token_count = 0;        // tokens of its own text (sum over `texts`)
  bool cached = true;         // false: cache="false" here or on an enclosing module
  bool required = false;      // required="true": a prompt must include it (when its parent is)
  std::vector<int> requires_modules;  // requires="...": indices, in attribute order
  std::vector<int> excludes_modules;  // excludes="..."
  // Its own content, interleaved by position: text pieces, parameter slots and nested modules
  // (unions' members included).
  std::vector<PmlTextPiece> texts;
  std::vector<PmlParameter> parameters;
  std::vector<int> children;  // directly nested modules, in document order
  // What its text attends to when encoded, by position: the always-included text before it,
  // the text of its enclosing modules before it, and the text of the earlier cached members of
  // its <scaffold>; never sibling modules, nested modules, parameter slots or uncached modules.
  std::vector<PmlTextRef> span;
  // Content key: changes when its own tokens or positions, or any piece in its span (or what
  // that attended to), or a scaffold default standing in its parameter slots, change.
  std::string key;
  int end() const { return start + length; }
};

// A `<union>`: members share [start, start + length), its longest member's length.
struct PmlUnion {
  PmlSourcePos pos;
  int parent = -1;  // enclosing module, -1 at the top level
  int start = 0;
  int length = 0;
  std::vector<int> members;  // module indices, in document order
  int default_member = -1;   // scaffold="name": included when a prompt picks no member
};

// A `<scaffold>`: modules encoded together, each attending to the earlier (cached) ones.
struct PmlScaffold {
  PmlSourcePos pos;
  int parent = -1;  // enclosing module, -1 at the top level
  std::vector<int> members;
};

// A schema laid out for one text encoder.
struct SchemaLayout {
  std::string name;
  std::string file;        // the path it was read from (as given), for messages
  int total_length = 0;    // positions reserved by the whole schema; prompt text starts here
  int context_length = 0;  // the encoder's ContextLength()
  std::optional<int32_t> bos;
  // The always-included text (text and role tags outside any module), by position; with a BOS,
  // always[0] starts with it at position 0 (and may hold nothing else).
  std::vector<PmlTextPiece> always;
  std::vector<PmlModule> modules;
  std::vector<PmlUnion> unions;        // in document order (outer before inner)
  std::vector<PmlScaffold> scaffolds;  // in document order
  // Pieces start right after what they attend to, laid end to end, instead of at their reserved
  // positions: the layout the contiguous position mode encodes (docs/modules.md).
  bool contiguous = false;

  // Index of the module called `name`, or -1.
  int FindModule(std::string_view module_name) const;
  const PmlTextPiece& Piece(const PmlTextRef& ref) const;
};

// What `promptcache schema show FILE` prints: every module's range, reserved length, token
// count, flags and span, parameters, unions, scaffolds and the total length.
std::string FormatLayout(const SchemaLayout& layout);

// A module reference in a prompt: <NAME PARAM="argument" ...> with nested references inside.
struct PmlModuleRef {
  std::string name;
  PmlSourcePos pos;
  std::vector<std::pair<std::string, std::string>> arguments;  // attribute name -> value
  std::vector<PmlModuleRef> children;
};

// A piece of the prompt's new text: plain text (role empty) or one chat turn.
struct PmlPromptText {
  std::string role;  // "", "system", "user" or "assistant"
  std::string text;  // normalized content
  PmlSourcePos pos;
};

// Where a prompt's tokens sit. kSchema: at the positions the schema reserves, with gaps where
// modules are left out (the Prompt Cache paper's layout). kContiguous: laid end to end from 0, in
// schema order, as the same text sent plainly would be; cached keys are rotated to their new
// positions (docs/modules.md). kDefault: the engine's choice (EngineOptions::module_positions).
enum class PmlPositions { kDefault, kSchema, kContiguous };
// "schema", "contiguous" ("default" for kDefault).
std::string_view PmlPositionsName(PmlPositions positions);
// The inverse for "schema" and "contiguous"; InvalidArgument naming both otherwise.
Result<PmlPositions> ParsePmlPositions(std::string_view name);

// A parsed `<prompt schema="...">`, not yet checked against its schema.
struct PmlPrompt {
  std::string file;                                 // names it in messages
  std::string schema;                               // the schema it names
  PmlPositions positions = PmlPositions::kDefault;  // <prompt positions="...">
  // <prompt recompute="0.15">: the share of cached tokens encoded without part of this prompt's
  // context that is recomputed with it (CacheBlend, docs/modules.md); < 0: the engine's default.
  double recompute = -1;
  PmlSourcePos pos;  // of the <prompt> element
  std::vector<PmlModuleRef> modules;
  std::vector<PmlPromptText> text;  // the new input, in order
};

// Parses a prompt. Module references come first (their order does not matter), then text and
// role tags; errors are "FILE:LINE:COL: prompt: WHAT".
Result<PmlPrompt> ParsePrompt(std::string_view xml, const std::string& file = "prompt");

}  // namespace promptcache
