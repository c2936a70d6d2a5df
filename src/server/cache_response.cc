#include "server/cache_response.h"

#include <algorithm>

#include "core/enum_names.h"
#include "server/json_fields.h"

namespace promptcache {
namespace {

using ojson = nlohmann::ordered_json;

}  // namespace

constexpr EnumName<TokenSource> kTokenSourceNames[] = {
    {TokenSource::kRam, "ram"},           {TokenSource::kDisk, "disk"},
    {TokenSource::kRemote, "remote"},     {TokenSource::kModule, "module"},
    {TokenSource::kComputed, "computed"}, {TokenSource::kSegment, "segment"}};
static_assert(NamesEach(kTokenSourceNames, TokenSource::kRam, TokenSource::kSegment));

const char* TokenSourceName(TokenSource source) {
  return NameOf(kTokenSourceNames, source, "computed");
}

ojson CacheMapJson(const CacheMapRequest& request, const CompletionResult& result,
                   const Tokenizer& tokenizer) {
  ojson runs = ojson::array();
  int start = 0;
  for (const SourceRun& run : result.sources) {
    runs.push_back(
        {{"source", TokenSourceName(run.source)}, {"start", start}, {"length", run.length}});
    start += run.length;
  }
  const int generated = static_cast<int>(result.tokens.size());
  if (generated > 0) {
    runs.push_back({{"source", "generated"}, {"start", start}, {"length", generated}});
  }
  ojson pieces = ojson::array();
  // Special tokens show as their spelling (<s>, <|im_start|>): the page shows what was read.
  for (const int32_t id : request.prompt) pieces.push_back(tokenizer.TokenBytes(id, true));
  for (const int32_t id : result.tokens) pieces.push_back(tokenizer.TokenBytes(id, true));
  // With nothing cached the prompt's computed part would have been all of it: at the prefill
  // rate this request measured (an estimate; attention makes longer prompts a little slower).
  const double per_token =
      result.computed_tokens > 0 ? result.prompt_ms / result.computed_tokens : 0.0;
  ojson map;
  map["block_size"] = request.block_size;
  map["prompt_tokens"] = result.prompt_tokens;
  map["cached_tokens"] = result.cached_tokens;
  map["computed_tokens"] = result.computed_tokens;
  map["generated_tokens"] = generated;
  map["ttft_ms"] = result.ttft_ms;
  map["recompute_estimate_ms"] =
      result.ttft_ms - result.prompt_ms + per_token * result.prompt_tokens;
  map["runs"] = std::move(runs);
  map["pieces"] = std::move(pieces);
  if (!request.positions.empty()) map["positions"] = request.positions;
  return map;
}

ojson CacheTreeJson(std::vector<CacheBlockInfo> blocks, int block_size,
                    const Tokenizer& tokenizer) {
  std::stable_sort(blocks.begin(), blocks.end(),
                   [](const CacheBlockInfo& a, const CacheBlockInfo& b) {
                     return a.depth != b.depth ? a.depth < b.depth : a.key < b.key;
                   });
  ojson data = ojson::array();
  for (const CacheBlockInfo& b : blocks) {
    std::string text;
    for (const int32_t id : b.tokens) text += tokenizer.TokenBytes(id, true);
    data.push_back({{"key", b.key},
                    {"parent", b.parent.empty() ? ojson() : ojson(b.parent)},
                    {"depth", b.depth},
                    {"tokens", b.tokens},
                    {"text", text},
                    {"kind", !b.in_ram   ? "disk"
                             : b.prefix  ? "prefix"
                             : b.segment ? "segment"
                                         : "module"},
                    {"segment", b.segment},
                    {"pinned", b.pinned},
                    {"in_ram", b.in_ram},
                    {"on_disk", b.on_disk},
                    {"hits", b.hits},
                    {"idle_seconds", b.idle_seconds}});
  }
  return ojson{{"object", "cache.tree"}, {"block_size", block_size}, {"data", std::move(data)}};
}

std::string AddJsonField(const std::string& body, const std::string& field, const ojson& value) {
  ojson j = ojson::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return body;
  j[field] = value;
  return Dump(j);
}

std::string AddEventField(const std::string& event, const std::string& field, const ojson& value) {
  const std::string prefix = "data: ", suffix = "\n\n";
  if (event.size() < prefix.size() + suffix.size() ||
      event.compare(0, prefix.size(), prefix) != 0) {
    return event;
  }
  const std::string body =
      event.substr(prefix.size(), event.size() - prefix.size() - suffix.size());
  return prefix + AddJsonField(body, field, value) + suffix;
}

}  // namespace promptcache
