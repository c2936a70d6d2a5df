#include "server/tool_calls.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/enum_names.h"
#include "core/text.h"
#include "grammar/grammar.h"
#include "grammar/json_depth.h"
#include "grammar/json_schema.h"
#include "server/harmony.h"

namespace promptcache {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kRecipient = ">>>";            // Functionary: before each message part
constexpr std::string_view kToAll = "all\n";              // Functionary: the part that is text
constexpr std::string_view kFunctionOpen = "<function=";  // Functionary v3.1
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kFunctools = "functools";  // FireFunction v2, before its array
constexpr std::string_view kSpace = " \t\r\n";
constexpr std::string_view kAction = "Action:";  // Command R+, before its ```json array
constexpr std::string_view kFence = "```";
constexpr std::string_view kActionOpen = "<|START_ACTION|>";  // Command R7B
constexpr std::string_view kActionClose = "<|END_ACTION|>";
constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>";  // DeepSeek R1
constexpr std::string_view kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsSep = "<｜tool▁sep｜>";
constexpr std::string_view kHarmonyMessage = "<|message|>";  // gpt-oss: before the arguments
constexpr std::string_view kHarmonyCall = "<|call|>";        // and after them

// JSON's whitespace only, around the arguments the model wrote.
std::string_view TrimJson(std::string_view s) { return Trim(s, kSpace); }

// A marker in `text`, whole or arriving at its end (a prefix of it ends `text`), or npos.
size_t MarkerStart(std::string_view text, std::string_view marker) {
  if (const size_t at = text.find(marker); at != std::string_view::npos) return at;
  const size_t partial = PartialTagStart(text, marker);
  return partial < text.size() ? partial : std::string_view::npos;
}

// Generated text (or arguments inside it) as JSON; discarded (not a call) when it nests deeper
// than kMaxJsonNesting, since parsing and dumping it would recurse per level.
ojson ParseJson(std::string_view text) {
  if (JsonNestingDepth(text) > kMaxJsonNesting) return ojson(ojson::value_t::discarded);
  return ojson::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

// A call object: a non-empty string under `name_key` ("tool_name" for Command R) and arguments
// under "arguments" or "parameters", an object or an object's JSON text (absent: none).
bool ReadCall(const ojson& j, ToolCall* out, const char* name_key = "name") {
  if (!j.is_object()) return false;
  auto name = j.find(name_key);
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return false;
  out->name = name->get<std::string>();
  ojson args = ojson::object();
  for (const char* key : {"arguments", "parameters"}) {
    auto a = j.find(key);
    if (a == j.end()) continue;
    args = *a;
    if (args.is_string()) args = ParseJson(args.get<std::string>());
    break;
  }
  if (!args.is_object()) return false;
  out->arguments = args.dump();
  return true;
}

// Calls that each start with `open`, one or more, whitespace between. `read` takes the text after
// one call's `open` and returns how much of it the call used (through its closing tag, or all of
// it for a last call without one), or npos where the call is malformed.
bool ParseOpenedCalls(std::string_view rest, std::string_view open, std::vector<ToolCall>* calls,
                      const std::function<size_t(std::string_view, ToolCall*)>& read) {
  while (true) {
    const size_t b = rest.find_first_not_of(kSpace);
    if (b == std::string_view::npos) return !calls->empty();
    rest.remove_prefix(b);
    if (rest.substr(0, open.size()) != open) return false;
    rest.remove_prefix(open.size());
    ToolCall call;
    const size_t used = read(rest, &call);
    if (used == std::string_view::npos) return false;
    calls->push_back(std::move(call));
    rest.remove_prefix(used);
  }
}

// <tool_call>{...}</tool_call>, one or more, whitespace between; the last may lack its closing
// tag (generation stopped at the end of the turn).
bool ParseHermes(std::string_view rest, std::vector<ToolCall>* calls) {
  return ParseOpenedCalls(rest, kHermesOpen, calls, [](std::string_view rest, ToolCall* call) {
    const size_t close = rest.find(kHermesClose);
    if (!ReadCall(ParseJson(TrimJson(rest.substr(0, close))), call)) return std::string_view::npos;
    return close == std::string_view::npos ? rest.size() : close + kHermesClose.size();
  });
}

bool ParseArray(std::string_view rest, std::vector<ToolCall>* calls,
                const char* name_key = "name") {
  const ojson j = ParseJson(TrimJson(rest));
  if (!j.is_array() || j.empty()) return false;
  for (const ojson& item : j) {
    ToolCall call;
    if (!ReadCall(item, &call, name_key)) return false;
    calls->push_back(std::move(call));
  }
  return true;
}

bool IsToolName(std::string_view s) {
  if (s.empty()) return false;
  for (const char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  }
  return true;
}

// Functionary v3.2's calls: "name\n{...}" parts, each after ">>>" but the first when
// `first_bare` (the generation prompt wrote its ">>>"). Arguments end at a ">>>" (or the text's
// end) where they are an object's JSON, so a ">>>" inside a string argument does not split them.
bool ParseFunctionaryV32(std::string_view rest, bool first_bare, std::vector<ToolCall>* calls) {
  while (true) {
    if (!(first_bare && calls->empty())) {
      if (TrimJson(rest).empty() && !calls->empty()) return true;
      if (rest.substr(0, kRecipient.size()) != kRecipient) return false;
      rest.remove_prefix(kRecipient.size());
    }
    const size_t eol = rest.find('\n');
    if (eol == std::string_view::npos || !IsToolName(rest.substr(0, eol))) return false;
    ToolCall call;
    call.name = std::string(rest.substr(0, eol));
    if (call.name == "all") return false;  // text after calls: not this format's order
    rest.remove_prefix(eol + 1);
    size_t end = 0;
    ojson args;
    do {
      end = rest.find(kRecipient, end == 0 ? 0 : end + 1);
      args = ParseJson(TrimJson(rest.substr(0, end)));
    } while (!args.is_object() && end != std::string_view::npos);
    if (!args.is_object()) return false;
    call.arguments = args.dump();
    calls->push_back(std::move(call));
    if (end == std::string_view::npos) return true;
    rest.remove_prefix(end);
  }
}

// Arguments, an object's JSON, that end at the first `end` after which they parse (so an `end`
// inside a string argument does not cut them), or at the text's end. *used: through `end`.
bool ReadArgumentsUntil(std::string_view rest, std::string_view end, ToolCall* call, size_t* used) {
  size_t at = std::string_view::npos;
  ojson args;
  do {
    at = rest.find(end, at == std::string_view::npos ? 0 : at + 1);
    args = ParseJson(TrimJson(rest.substr(0, at)));
  } while (!args.is_object() && at != std::string_view::npos);
  if (!args.is_object()) return false;
  call->arguments = args.dump();
  *used = at == std::string_view::npos ? rest.size() : at + end.size();
  return true;
}

// Functionary v3.1: <function=name>{...}</function>, one or more, whitespace between; the last
// may lack its closing tag.
bool ParseFunctionaryV31(std::string_view rest, std::vector<ToolCall>* calls) {
  return ParseOpenedCalls(rest, kFunctionOpen, calls, [](std::string_view rest, ToolCall* call) {
    const size_t gt = rest.find('>');
    if (gt == std::string_view::npos || !IsToolName(rest.substr(0, gt))) {
      return std::string_view::npos;
    }
    call->name = std::string(rest.substr(0, gt));
    size_t used = 0;
    if (!ReadArgumentsUntil(rest.substr(gt + 1), kFunctionClose, call, &used)) {
      return std::string_view::npos;
    }
    return gt + 1 + used;
  });
}

// `s` without `suffix` (and the whitespace before it) where it ends with it.
std::string_view StripSuffix(std::string_view s, std::string_view suffix) {
  s = TrimJson(s);
  if (s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix) {
    s.remove_suffix(suffix.size());
  }
  return s;
}

// Command R+, after "Action:": a JSON array of {"tool_name", "parameters"} objects, in a ```json
// fence (or a bare ``` one, or none).
bool ParseCommandRPlus(std::string_view rest, std::vector<ToolCall>* calls) {
  rest = TrimJson(rest);
  if (rest.substr(0, kFence.size()) == kFence) {
    rest.remove_prefix(kFence.size());
    if (rest.substr(0, 4) == "json") rest.remove_prefix(4);
    rest = StripSuffix(rest, kFence);
  }
  return ParseArray(rest, calls, "tool_name");
}

// DeepSeek R1, after <｜tool▁calls▁begin｜> (or at the first <｜tool▁call▁begin｜>):
// <｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n```json\n{...}\n```<｜tool▁call▁end｜> per call,
// whitespace between, then <｜tool▁calls▁end｜>; at the text's end the closing markers may lack.
bool ParseDeepSeekR1(std::string_view rest, std::vector<ToolCall>* calls) {
  while (true) {
    rest = rest.substr(std::min(rest.size(), rest.find_first_not_of(kSpace)));
    if (rest.empty()) return !calls->empty();
    if (rest.substr(0, kDsCallsEnd.size()) == kDsCallsEnd) {
      return !calls->empty() && TrimJson(rest.substr(kDsCallsEnd.size())).empty();
    }
    if (rest.substr(0, kDsCallBegin.size()) != kDsCallBegin) return false;
    rest.remove_prefix(kDsCallBegin.size());
    const size_t sep = rest.find(kDsSep);
    if (sep == std::string_view::npos || rest.substr(0, sep) != "function") return false;
    rest.remove_prefix(sep + kDsSep.size());
    const size_t eol = rest.find('\n');
    if (eol == std::string_view::npos || !IsToolName(rest.substr(0, eol))) return false;
    ToolCall call;
    call.name = std::string(rest.substr(0, eol));
    rest.remove_prefix(eol + 1);
    const std::string_view open = "```json";
    if (rest.substr(0, open.size()) != open) return false;
    rest.remove_prefix(open.size());
    size_t used = 0;
    if (!ReadArgumentsUntil(rest, kFence, &call, &used)) return false;
    calls->push_back(std::move(call));
    rest.remove_prefix(used);
    rest = rest.substr(std::min(rest.size(), rest.find_first_not_of(kSpace)));
    if (rest.substr(0, kDsCallEnd.size()) == kDsCallEnd) {
      rest.remove_prefix(kDsCallEnd.size());
    } else if (!rest.empty()) {
      return false;
    }
  }
}

// Harmony, after each kHarmonyCallOpen: name, anything up to <|message|> (a raw header's
// " <|constrain|>json"), arguments up to <|call|> (which a last call may lack).
bool ParseHarmony(std::string_view rest, std::vector<ToolCall>* calls) {
  return ParseOpenedCalls(rest, kHarmonyCallOpen, calls, [](std::string_view rest, ToolCall* call) {
    const size_t message = rest.find(kHarmonyMessage);
    if (message == std::string_view::npos) return std::string_view::npos;
    const std::string_view name = rest.substr(0, rest.find_first_of(" <"));
    if (!IsToolName(name)) return std::string_view::npos;
    call->name = std::string(name);
    const size_t args = message + kHarmonyMessage.size();
    size_t used = 0;
    if (!ReadArgumentsUntil(rest.substr(args), kHarmonyCall, call, &used)) {
      return std::string_view::npos;
    }
    return args + used;
  });
}

}  // namespace

constexpr EnumName<ToolCallFormat> kToolCallFormatNames[] = {
    {ToolCallFormat::kNone, "none"},
    {ToolCallFormat::kHermes, "hermes"},
    {ToolCallFormat::kLlama3, "llama3_json"},
    {ToolCallFormat::kMistral, "mistral"},
    {ToolCallFormat::kFunctionaryV32, "functionary_v3_2"},
    {ToolCallFormat::kFunctionaryV31, "functionary_v3_1"},
    {ToolCallFormat::kFireFunction, "firefunction_v2"},
    {ToolCallFormat::kCommandRPlus, "command_r_plus"},
    {ToolCallFormat::kCommandR7B, "command_r7b"},
    {ToolCallFormat::kDeepSeekR1, "deepseek_r1"},
    {ToolCallFormat::kHarmony, "harmony"}};
static_assert(NamesEach(kToolCallFormatNames, ToolCallFormat::kNone, ToolCallFormat::kHarmony));

std::string_view ToolCallFormatName(ToolCallFormat format) {
  return NameOf(kToolCallFormatNames, format, "none");
}

ToolCallFormat DetectToolCallFormat(std::string_view t) {
  auto has = [&](std::string_view s) { return t.find(s) != std::string_view::npos; };
  if (TemplateIsHarmony(t)) return ToolCallFormat::kHarmony;
  if (has(kHermesOpen)) return ToolCallFormat::kHermes;
  if (has(kMistralMarker)) return ToolCallFormat::kMistral;
  if (has(">>>${recipient}")) return ToolCallFormat::kFunctionaryV32;
  if (has(kFunctionOpen)) return ToolCallFormat::kFunctionaryV31;
  if (has("functools[")) return ToolCallFormat::kFireFunction;
  if (has(kActionOpen)) return ToolCallFormat::kCommandR7B;
  if (has("Action:") && has("\"tool_name\": ")) return ToolCallFormat::kCommandRPlus;
  if (has(kDsCallsBegin)) return ToolCallFormat::kDeepSeekR1;
  if (has("<|start_header_id|>") && has("\"parameters\": ")) return ToolCallFormat::kLlama3;
  return ToolCallFormat::kNone;
}

size_t ToolContentBegin(ToolCallFormat format, std::string_view text) {
  if (format != ToolCallFormat::kFunctionaryV32) return 0;
  const size_t p = text.substr(0, kRecipient.size()) == kRecipient ? kRecipient.size() : 0;
  return text.substr(p, kToAll.size()) == kToAll ? p + kToAll.size() : 0;
}

size_t ToolCallStart(ToolCallFormat format, std::string_view text) {
  const size_t first = text.find_first_not_of(kSpace);
  size_t at = text.size();
  switch (format) {
    case ToolCallFormat::kNone:
      return text.size();
    case ToolCallFormat::kHermes:
      at = std::min(at, MarkerStart(text, kHermesOpen));
      break;
    case ToolCallFormat::kFunctionaryV31:
      at = std::min(at, MarkerStart(text, kFunctionOpen));
      break;
    case ToolCallFormat::kHarmony:
      at = std::min(at, MarkerStart(text, kHarmonyCallOpen));
      break;
    case ToolCallFormat::kFireFunction:
      at = std::min(at, MarkerStart(text, "functools["));
      break;
    case ToolCallFormat::kCommandRPlus:
      at = std::min(at, MarkerStart(text, kAction));
      break;
    case ToolCallFormat::kDeepSeekR1:
      at = std::min({at, MarkerStart(text, kDsCallsBegin), MarkerStart(text, kDsCallBegin)});
      break;
    case ToolCallFormat::kCommandR7B:
      at = std::min(at, MarkerStart(text, kActionOpen));
      if (first == std::string_view::npos) return 0;
      if (text[first] == '[') at = std::min(at, first);
      break;
    case ToolCallFormat::kMistral:
      at = std::min(at, MarkerStart(text, kMistralMarker));
      if (first == std::string_view::npos) return 0;
      if (text[first] == '[') at = std::min(at, first);
      break;
    case ToolCallFormat::kFunctionaryV32: {
      // Until "all\n" has come, the output may be a call: hold it all.
      const size_t begin = ToolContentBegin(format, text);
      if (begin == 0) return 0;
      const size_t next = MarkerStart(text.substr(begin), kRecipient);
      return next == std::string_view::npos ? at : begin + next;
    }
    case ToolCallFormat::kLlama3: {
      if (first == std::string_view::npos) return 0;
      const std::string_view rest = text.substr(first);
      const size_t n = std::min(rest.size(), kPythonTag.size());
      if (rest[0] == '{' || rest.substr(0, n) == kPythonTag.substr(0, n)) at = first;
      break;
    }
  }
  return at;
}

std::string ToolTextStream::Release(ToolCallFormat format, const std::string& piece) {
  text += piece;
  const size_t start = ToolCallStart(format, text);
  sent = std::max(sent, ToolContentBegin(format, text));  // a marker, not text
  if (start <= sent) return "";
  std::string out = text.substr(sent, start - sent);
  sent = start;
  return out;
}

std::string ToolTextStream::Rest(ToolCallFormat format, std::string_view full,
                                 std::string_view content, bool has_calls) {
  const size_t begin = ToolContentBegin(format, full);
  sent = std::max(sent, begin);
  const size_t end = has_calls ? begin + content.size() : full.size();
  return end > sent ? std::string(full.substr(sent, end - sent)) : "";
}

namespace {

// Functionary v3.2's output: its content after "all\n" (when it starts so), then its calls.
ParsedOutput ParseFunctionaryV32Output(std::string_view text) {
  constexpr ToolCallFormat format = ToolCallFormat::kFunctionaryV32;
  ParsedOutput out;
  const size_t begin = ToolContentBegin(format, text);
  std::string_view rest = text.substr(begin);
  size_t start = 0;
  if (begin > 0) {
    start = rest.find(kRecipient);
    if (start != std::string_view::npos) rest.remove_prefix(start);
  } else if (rest.substr(0, kRecipient.size()) == kRecipient) {
    rest.remove_prefix(kRecipient.size());
  }
  if (start == std::string_view::npos || !ParseFunctionaryV32(rest, begin == 0, &out.calls)) {
    out.calls.clear();
    out.content = std::string(text.substr(begin));
    return out;
  }
  out.content = std::string(text.substr(begin, start));
  return out;
}

// Where a format's calls start in the output and the text ParseCalls reads (markers stripped);
// start is npos when nothing there is a call.
struct CallsAt {
  size_t start = std::string_view::npos;
  std::string_view rest;
};

CallsAt FindCalls(ToolCallFormat format, std::string_view text) {
  CallsAt at;
  const size_t first = text.find_first_not_of(kSpace);
  switch (format) {
    case ToolCallFormat::kNone:
    case ToolCallFormat::kFunctionaryV32:  // ParseFunctionaryV32Output
      break;
    case ToolCallFormat::kHermes:
      at.start = text.find(kHermesOpen);
      if (at.start != std::string_view::npos) at.rest = text.substr(at.start);
      break;
    case ToolCallFormat::kFunctionaryV31:
      at.start = text.find(kFunctionOpen);
      if (at.start != std::string_view::npos) at.rest = text.substr(at.start);
      break;
    case ToolCallFormat::kHarmony:
      at.start = text.find(kHarmonyCallOpen);
      if (at.start != std::string_view::npos) at.rest = text.substr(at.start);
      break;
    case ToolCallFormat::kFireFunction:
      at.start = text.find("functools[");
      if (at.start != std::string_view::npos) at.rest = text.substr(at.start + kFunctools.size());
      break;
    case ToolCallFormat::kCommandRPlus:
      at.start = text.find(kAction);
      if (at.start != std::string_view::npos) at.rest = text.substr(at.start + kAction.size());
      break;
    case ToolCallFormat::kDeepSeekR1:
      at.start = text.find(kDsCallsBegin);
      if (at.start != std::string_view::npos) {
        at.rest = text.substr(at.start + kDsCallsBegin.size());
      } else if ((at.start = text.find(kDsCallBegin)) != std::string_view::npos) {
        at.rest = text.substr(at.start);
      }
      break;
    case ToolCallFormat::kCommandR7B:
      at.start = text.find(kActionOpen);
      if (at.start != std::string_view::npos) {
        at.rest = StripSuffix(text.substr(at.start + kActionOpen.size()), kActionClose);
      } else if (first != std::string_view::npos && text[first] == '[') {
        at.start = first;
        at.rest = StripSuffix(text.substr(first), kActionClose);
      }
      break;
    case ToolCallFormat::kMistral:
      at.start = text.find(kMistralMarker);
      if (at.start != std::string_view::npos) {
        at.rest = text.substr(at.start + kMistralMarker.size());
      } else if (first != std::string_view::npos && text[first] == '[') {
        at.start = first;
        at.rest = text.substr(first);
      }
      break;
    case ToolCallFormat::kLlama3:
      if (first == std::string_view::npos) break;
      at.start = first;
      at.rest = text.substr(first);
      if (at.rest.substr(0, kPythonTag.size()) == kPythonTag) {
        at.rest.remove_prefix(kPythonTag.size());
      }
      break;
  }
  return at;
}

// The calls in `rest` (FindCalls'), in the format's syntax; false if it does not parse.
bool ParseCalls(ToolCallFormat format, std::string_view rest, std::vector<ToolCall>* calls) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return ParseHermes(rest, calls);
    case ToolCallFormat::kFunctionaryV31:
      return ParseFunctionaryV31(rest, calls);
    case ToolCallFormat::kHarmony:
      return ParseHarmony(rest, calls);
    case ToolCallFormat::kMistral:
    case ToolCallFormat::kFireFunction:
      return ParseArray(rest, calls);
    case ToolCallFormat::kCommandR7B:
      return ParseArray(rest, calls, "tool_name");
    case ToolCallFormat::kCommandRPlus:
      return ParseCommandRPlus(rest, calls);
    case ToolCallFormat::kDeepSeekR1:
      return ParseDeepSeekR1(rest, calls);
    default: {  // Llama 3: one JSON call
      ToolCall call;
      if (!ReadCall(ParseJson(TrimJson(rest)), &call)) return false;
      calls->push_back(std::move(call));
      return true;
    }
  }
}

}  // namespace

ParsedOutput ParseToolCalls(ToolCallFormat format, std::string_view text) {
  if (format == ToolCallFormat::kFunctionaryV32) return ParseFunctionaryV32Output(text);
  ParsedOutput out;
  const CallsAt at = FindCalls(format, text);
  if (at.start == std::string_view::npos || !ParseCalls(format, at.rest, &out.calls)) {
    out.calls.clear();
    out.content = std::string(text);
    return out;
  }
  out.content = std::string(text.substr(0, at.start));
  return out;
}

Result<std::string> ToolCallGbnf(ToolCallFormat format, const std::vector<ToolSpec>& tools,
                                 int* failed_tool) {
  if (format == ToolCallFormat::kNone) {
    return InvalidArgument("the chat template shows no tool-call format this server knows");
  }
  if (tools.empty()) return InvalidArgument("no tools to call");
  const bool cohere =
      format == ToolCallFormat::kCommandRPlus || format == ToolCallFormat::kCommandR7B;
  const char* args_key = format == ToolCallFormat::kLlama3 || cohere ? "parameters" : "arguments";
  // R7B numbers the calls of a turn; one forced call is the turn's first.
  const std::string name_head = format == ToolCallFormat::kCommandR7B
                                    ? "{\"tool_call_id\": \"0\", \"tool_name\": "
                                    : (cohere ? "{\"tool_name\": " : "{\"name\": ");
  std::string calls, rules;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string& p = tools[i].parameters;
    std::string top;
    Result<std::string> r = JsonSchemaRules(
        TrimJson(p).empty() || TrimJson(p) == "{}" ? R"({"type": "object", "properties": {}})" : p,
        "tool" + std::to_string(i) + "x", &top);
    if (!r.ok()) {
      if (failed_tool != nullptr) *failed_tool = static_cast<int>(i);
      return r.status();
    }
    const std::string rule = "tool" + std::to_string(i);
    if (format == ToolCallFormat::kFunctionaryV32) {
      rules += rule + " ::= " + GbnfLiteral(tools[i].name + "\n") + " " + top + "\n" + *r;
    } else if (format == ToolCallFormat::kFunctionaryV31) {
      rules += rule + " ::= " + GbnfLiteral("<function=" + tools[i].name + ">") + " " + top + " " +
               GbnfLiteral(kFunctionClose) + "\n" + *r;
    } else if (format == ToolCallFormat::kHarmony) {
      rules += rule + " ::= " +
               GbnfLiteral(std::string(kHarmonyCallOpen) + tools[i].name + " <|constrain|>json" +
                           std::string(kHarmonyMessage)) +
               " " + top + "\n" + *r;
    } else if (format == ToolCallFormat::kDeepSeekR1) {
      rules += rule + " ::= " +
               GbnfLiteral(std::string(kDsCallBegin) + "function" + std::string(kDsSep) +
                           tools[i].name + "\n```json\n") +
               " " + top + " " + GbnfLiteral("\n```" + std::string(kDsCallEnd)) + "\n" + *r;
    } else {
      const std::string head = name_head + ojson(tools[i].name).dump() + ", \"" + args_key + "\": ";
      rules += rule + " ::= " + GbnfLiteral(head) + " " + top + " \"}\"\n" + *r;
    }
    calls += (calls.empty() ? "" : " | ") + rule;
  }
  std::string root;
  switch (format) {
    case ToolCallFormat::kHermes:
      root = GbnfLiteral("<tool_call>\n") + " call " + GbnfLiteral("\n</tool_call>");
      break;
    case ToolCallFormat::kMistral:
    case ToolCallFormat::kCommandR7B:  // <|START_ACTION|> is a control token, as [TOOL_CALLS]
      root = "\"[\" call \"]\"";
      break;
    case ToolCallFormat::kCommandRPlus:
      root = GbnfLiteral("Action:\n```json\n[") + " call " + GbnfLiteral("]\n```");
      break;
    case ToolCallFormat::kDeepSeekR1:
      root = GbnfLiteral(kDsCallsBegin) + " call " + GbnfLiteral(kDsCallsEnd);
      break;
    case ToolCallFormat::kFireFunction:
      root = "\" functools[\" call \"]\"";
      break;
    default:
      root = "call";
      break;
  }
  return "root ::= " + root + "\ncall ::= " + calls + "\n" + rules + JsonSharedGbnf();
}

}  // namespace promptcache
