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
// The plain data of prompts and schema layouts (PmlPrompt, SchemaLayout, ...) is part of the public
// API and defined in include/promptcache/pml.h; this header adds the parsing, layout and planning
// the engine does with them.
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
#include "promptcache/pml.h"

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

// Tokens at consecutive positions [start, start + tokens.size()).
struct PmlTokens {
  int start = 0;
  std::vector<int32_t> tokens;
  int end() const { return start + static_cast<int>(tokens.size()); }
};

// Reads and lays out the schema file at `path`; `src` files are read relative to its folder.
// Errors (InvalidArgument; NotFound/IoError for unreadable files; OutOfRange when the schema is
// longer than the encoder's context) are one line: "FILE:LINE:COL: schema 'NAME': WHAT".
Result<SchemaLayout> LoadSchema(const std::string& path, const PmlTextEncoder& encoder);

// The same for schema text in memory; `path` names it in messages and its folder is the base of
// `src` attributes (a path without a folder: the current directory).
Result<SchemaLayout> ParseSchema(std::string_view xml, const std::string& path,
                                 const PmlTextEncoder& encoder);

// A recompute share: a number from 0 to 1 ("0.15"); InvalidArgument otherwise.
Result<double> ParseRecompute(std::string_view text);

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
