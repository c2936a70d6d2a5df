// libFuzzer target for the Jinja interpreter: the input up to its first NUL byte is a template,
// the rest a user message. The template is parsed and rendered with a conversation (messages
// with tool calls, tools) under tight limits. Whatever the input, this must end in a Status,
// never a crash, a hang, a leak or unbounded memory, and the rendered text's user-written ranges
// must be sorted, disjoint and inside the text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "jinja/template.h"

namespace promptcache {
namespace {

void Check(bool cond) {
  if (!cond) std::abort();
}

constexpr std::string_view kConversation = R"([
  {"role": "system", "content": "You are helpful."},
  {"role": "user", "content": "Weather in Paris?"},
  {"role": "assistant", "content": null, "tool_calls": [{"id": "call12345", "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
  {"role": "tool", "content": "{\"temp\": 21}", "tool_call_id": "call12345"}])";

constexpr std::string_view kTools = R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Weather.", "parameters": {"type": "object", "properties":
  {"city": {"type": "string", "enum": ["Paris", "Rome"]}}, "required": ["city"]}}}])";

}  // namespace
}  // namespace promptcache

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace promptcache;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view source = input.substr(0, nul);
  const std::string_view message = nul == std::string_view::npos ? "" : input.substr(nul + 1);

  Result<jinja::Template> t = jinja::Template::Parse(source);
  if (!t.ok()) {
    Check(!t.status().message().empty());
    return 0;
  }
  nlohmann::ordered_json messages = nlohmann::ordered_json::parse(kConversation);
  // Invalid UTF-8 cannot come from JSON; the fuzzed message is passed as a plain string variable.
  jinja::Variables vars;
  Check(vars.SetJson("messages", messages, true).ok());
  Check(vars.SetJson("tools", nlohmann::ordered_json::parse(kTools), true).ok());
  vars.SetString("content", message, /*user_written=*/true);
  vars.SetString("bos_token", "<s>", false);
  vars.SetString("eos_token", "</s>", false);
  vars.SetBool("add_generation_prompt", true);
  jinja::RenderOptions options;
  options.limits.max_steps = 100'000;
  options.limits.max_depth = 150;
  options.limits.max_output_bytes = size_t(1) << 20;
  options.limits.max_string_bytes = size_t(1) << 20;
  options.limits.max_list_items = size_t(1) << 14;
  options.limits.max_created_bytes = size_t(64) << 20;
  options.now = [] {
    std::tm tm{};
    tm.tm_year = 124, tm.tm_mon = 6, tm.tm_mday = 26;
    return tm;
  };
  Result<MarkedText> text = t->Render(vars, options);
  if (!text.ok()) {
    Check(!text.status().message().empty());
    return 0;
  }
  size_t last_end = 0;
  bool first = true;
  for (const auto& [begin, end] : text->user_ranges()) {
    Check(begin < end && end <= text->size());
    Check(first || begin > last_end);
    first = false;
    last_end = end;
  }
  return 0;
}
