// PML, the prompt markup language of Prompt Cache (Gim et al., MLSys 2024): parsing, validation
// and position layout of schemas, and planning of prompts against them (spec: the design note
// shared/design/pml.md beside the repository).
//
// A schema declares reusable prompt modules at fixed positions; the engine precomputes each
// module's attention states (K/V) once at those positions, attending only to what the module's
// span says, and serves a prompt by concatenating the cached states of the modules it picks and
// computing only what is new (parameter arguments, cache="false" modules, the prompt's text).
// This module turns XML into plain data describing exactly that -- token ids, positions, spans,
// content keys -- and knows nothing of the model: tokenization and chat-role rendering come in
// through PmlTextEncoder.
//
// How the engine uses it:
//   1. LoadSchema(path, encoder) -> SchemaLayout. Encode `always` (the always-included text)
//      once, each piece at its positions, attending to the earlier always pieces. Then, in index
//      order (ancestors and scaffold peers come first), every module with `cached` set: gather
//      the cached K/V of the pieces in its `span`, and compute its own `texts` at their
//      positions attending to that span and causally to its own earlier tokens. Store the result
//      under the module's `key` (combined with the model's fingerprint); a module whose key is
//      unchanged after a schema reload needs no re-encoding.
//   2. ParsePrompt(xml) -> PmlPrompt; PlanPrompt(layout, prompt, encoder) -> PmlPlan. Take the
//      K/V of `plan.cached` from the cache, then compute `plan.computed` (cache="false" module
//      text), `plan.arguments` and `plan.new_text` at their positions, attending to everything
//      the plan includes (causally by position), and generate from `plan.end`.
//
// Text handling (the same for schemas and prompts). Each XML text node is normalized on its own:
//   - a run of whitespace at its start or end that contains a line break is indentation and is
//     removed; a run without a line break is kept ("name is <parameter .../>" keeps its space);
//   - the common indentation (spaces/tabs) of the lines that start after a line break is
//     removed, like Python's textwrap.dedent, so indented prose and code read as written;
//     whitespace-only lines become empty;
//   - CDATA sections and `src` files are taken verbatim: use <![CDATA[...]]> for text whose
//     surrounding whitespace matters.
// No separator is added between pieces: consecutive text (including role headers and end
// markers) is joined into one run and tokenized in one Tokenize call; parameters, nested modules,
// unions and scaffolds end a run. Whitespace-only text directly inside <union>, <scaffold> and
// around the prompt's module references is ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/marked_text.h"
#include "core/status.h"

namespace promptcache {

// Tokenization and chat rendering, implemented by the engine with the model's tokenizer and chat
// template (tests use a fake one).
class PmlTextEncoder {
 public:
  virtual ~PmlTextEncoder() = default;
  // Token ids of `text`: no BOS, no dummy prefix. Special-token spellings become their tokens
  // where the schema wrote them (module text, scaffolds, role markers), not in what the prompt's
  // author wrote (arguments, new text), unless the encoder trusts them.
  virtual std::vector<int32_t> Tokenize(const MarkedText& text) const = 0;
  // BOS id if the model adds one (PML puts it at position 0, first token of the always text).
  virtual std::optional<int32_t> Bos() const = 0;
  // Text before and after a chat turn's content for role "system"/"user"/"assistant"
  // (ChatML: "<|im_start|>user\n" / "<|im_end|>\n"; no chat template: "User: " / "\n").
  virtual std::pair<std::string, std::string> RoleWrap(std::string_view role) const = 0;
  // The model's context; a schema or prompt needing more positions is an error (<= 0: no limit).
  virtual int ContextLength() const = 0;
  // The most bytes of text one token can stand for (<= 0: unknown). A text run longer than
  // ContextLength() × this is refused before it is tokenized: a megabyte of module text costs no
  // tokenizer time to reject.
  virtual int MaxTokenBytes() const { return 0; }
};

// A place in an XML file, 1-based (column in UTF-8 characters); 0 when unknown.
struct PmlSourcePos {
  int line = 0;
  int column = 0;
};

// Tokens at consecutive positions [start, start + tokens.size()).
struct PmlTokens {
  int start = 0;
  std::vector<int32_t> tokens;
  int end() const { return start + static_cast<int>(tokens.size()); }
};

// A maximal run of text of one owner (the always-included text or one module), tokenized as a
// whole, at consecutive positions. Role headers and end markers are part of the run they touch.
struct PmlTextPiece {
  int start = 0;
  // Its start in the schema's own layout, where a derived layout moved it (ContiguousLayout);
  // -1: `start`.
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
  // positions: the layout the contiguous position mode encodes (serving/module_store.h).
  bool contiguous = false;

  // Index of the module called `name`, or -1.
  int FindModule(std::string_view module_name) const;
  const PmlTextPiece& Piece(const PmlTextRef& ref) const;
};

// Reads and lays out the schema file at `path`; `src` files are read relative to its folder.
// Errors (InvalidArgument; NotFound/IoError for unreadable files; OutOfRange when the schema is
// longer than the encoder's context) are one line: "FILE:LINE:COL: schema 'NAME': WHAT".
Result<SchemaLayout> LoadSchema(const std::string& path, const PmlTextEncoder& encoder);

// The same for schema text in memory; `path` names it in messages and its folder is the base of
// `src` attributes (a path without a folder: the current directory).
Result<SchemaLayout> ParseSchema(std::string_view xml, const std::string& path,
                                 const PmlTextEncoder& encoder);

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

// A parsed `<prompt schema="...">`, not yet checked against its schema.
// Where a prompt's tokens sit. kSchema: at the positions the schema reserves, with gaps where
// modules are left out (the Prompt Cache paper's layout). kContiguous: laid end to end from 0, in
// schema order, as the same text sent plainly would be; cached keys are rotated to their new
// positions (model/kv_shift.h). kDefault: the engine's choice (EngineOptions::module_positions).
enum class PmlPositions { kDefault, kSchema, kContiguous };
// "schema", "contiguous" ("default" for kDefault).
std::string_view PmlPositionsName(PmlPositions positions);
// The inverse for "schema" and "contiguous"; InvalidArgument naming both otherwise.
Result<PmlPositions> ParsePmlPositions(std::string_view name);
// A recompute share: a number from 0 to 1 ("0.15"); InvalidArgument otherwise.
Result<double> ParseRecompute(std::string_view text);

struct PmlPrompt {
  std::string file;                                 // names it in messages
  std::string schema;                               // the schema it names
  PmlPositions positions = PmlPositions::kDefault;  // <prompt positions="...">
  // <prompt recompute="0.15">: the share of cached tokens encoded without part of this prompt's
  // context that is recomputed with it (serving/blend.h); < 0: the engine's default.
  double recompute = -1;
  PmlSourcePos pos;  // of the <prompt> element
  std::vector<PmlModuleRef> modules;
  std::vector<PmlPromptText> text;  // the new input, in order
};

// Parses a prompt. Module references come first (their order does not matter), then text and
// role tags; errors are "FILE:LINE:COL: prompt: WHAT".
Result<PmlPrompt> ParsePrompt(std::string_view xml, const std::string& file = "prompt");

// A parameter's argument (or its scaffold default) at the parameter's slot; an argument shorter
// than the slot leaves the rest of the slot unused (a gap in positions).
struct PmlArgument {
  int module = 0;           // module index
  int parameter = 0;        // index into that module's `parameters`
  PmlTokens tokens;         // tokens.start == the slot's start
  bool is_default = false;  // the parameter's scaffold value
};

// How to serve one prompt. Positions of modules the prompt leaves out are gaps.
struct PmlPlan {
  std::vector<int> modules;    // included modules, in position (= index) order
  std::vector<int> defaulted;  // those included only as their union's default member
  // Text pieces whose K/V come from the cache, by position: all of `always`, then the text of
  // every included cached module.
  std::vector<PmlTextRef> cached;
  // Text pieces of included cache="false" modules, computed at request time, by position.
  std::vector<PmlTextRef> computed;
  std::vector<PmlArgument> arguments;  // by position
  PmlTokens new_text;                  // the prompt's text, starting at the schema's total_length
  int end = 0;                         // new_text.end(): where generation continues
};

// Checks `prompt` against `layout` and plans it. Interpretations of the spec:
//   - top-level references name top-level modules (union and scaffold members included); a
//     nested module is referenced inside its parent's reference;
//   - a union with no member picked contributes its scaffold (default) member whenever its
//     parent is included (top level: always), recursively; without a scaffold, nothing;
//   - required="true" means: included whenever its parent is (top level: always);
//   - requires/excludes are checked on the final set (defaults included);
//   - every parameter of an included module needs an argument or a scaffold default.
// Errors: NotFound for another schema's prompt or an unknown module, OutOfRange when the prompt
// needs more than the context, InvalidArgument otherwise: "FILE:LINE:COL: prompt for schema
// 'NAME': WHAT".
Result<PmlPlan> PlanPrompt(const SchemaLayout& layout, const PmlPrompt& prompt,
                           const PmlTextEncoder& encoder);

// The prompt's new text as one string: plain text as written, chat turns wrapped by
// encoder.RoleWrap. A final <assistant> turn is left open (no end marker), so generation
// continues it: the assistant's answer can be prefilled. The text is marked as user-written, the
// role markers as trusted.
MarkedText RenderPromptText(const PmlPrompt& prompt, const PmlTextEncoder& encoder);

// The schema among `schemas` that `prompt` names; NotFound listing the loaded names otherwise.
Result<const SchemaLayout*> FindPromptSchema(const PmlPrompt& prompt,
                                             const std::vector<const SchemaLayout*>& schemas);

}  // namespace promptcache
