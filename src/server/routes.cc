#include "server/routes.h"

#include <regex>
#include <vector>

namespace promptcache {
namespace {

constexpr ApiFlavour kOpenAi = ApiFlavour::kOpenAi;
constexpr ApiFlavour kAnthropic = ApiFlavour::kAnthropic;
constexpr ApiFlavour kOllama = ApiFlavour::kOllama;
constexpr bool kAdmin = true;
constexpr bool kAnyKey = false;

const Route kRoutes[] = {
    {"/v1/completions", "POST", HandleCompletions, kOpenAi, kAnyKey},
    {"/v1/chat/completions", "POST", HandleChatCompletions, kOpenAi, kAnyKey},
    {"/v1/responses", "POST", HandleResponses, kOpenAi, kAnyKey},
    {"/v1/responses/([^/]+)", "GET", HandleResponseGet, kOpenAi, kAnyKey},
    {"/v1/responses/([^/]+)", "DELETE", HandleResponseDelete, kOpenAi, kAnyKey},
    {"/v1/responses/([^/]+)/input_items", "GET", HandleResponseInputItems, kOpenAi, kAnyKey},
    {"/v1/messages", "POST", HandleMessages, kAnthropic, kAnyKey},
    {"/v1/messages/count_tokens", "POST", HandleCountTokens, kAnthropic, kAnyKey},
    {"/v1/embeddings", "POST", HandleEmbeddings, kOpenAi, kAnyKey},
    {"/api/embed", "POST", HandleOllamaEmbed, kOllama, kAnyKey},
    {"/api/chat", "POST", HandleOllamaChat, kOllama, kAnyKey},
    {"/api/generate", "POST", HandleOllamaGenerate, kOllama, kAnyKey},
    {"/api/tags", "GET", HandleOllamaTags, kOllama, kAnyKey},
    {"/api/show", "POST", HandleOllamaShow, kOllama, kAnyKey},
    {"/api/version", "GET", HandleOllamaVersion, kOllama, kAnyKey},
    {"/api/ps", "GET", HandleOllamaPs, kOllama, kAnyKey},
    {"/v1/models", "GET", HandleModels, kOpenAi, kAnyKey},
    {"/v1/models/([^/]+)", "GET", HandleModels, kOpenAi, kAnyKey},
    {"/health", "GET", HandleHealth, kOpenAi, kAnyKey},
    {"/metrics", "GET", HandleMetrics, kOpenAi, kAnyKey},
    {"/tokenize", "POST", HandleTokenize, kOpenAi, kAnyKey},
    {"/detokenize", "POST", HandleDetokenize, kOpenAi, kAnyKey},
    {"/v1/cache", "GET", HandleCacheList, kOpenAi, kAdmin},
    {"/v1/cache", "DELETE", HandleCacheDrop, kOpenAi, kAdmin},
    {"/v1/cache/save", "POST", HandleCacheSave, kOpenAi, kAdmin},
    {"/v1/cache/tree", "GET", HandleCacheTree, kOpenAi, kAdmin},
    {"/v1/cache/load", "POST", HandleCacheLoad, kOpenAi, kAnyKey},
    {"/v1/cache/pin", "POST", HandleCachePin, kOpenAi, kAnyKey},
    {"/v1/cache/unpin", "POST", HandleCacheUnpin, kOpenAi, kAnyKey},
    {"/v1/cache/lookup", "POST", HandleCacheLookup, kOpenAi, kAnyKey},
    {"/v1/cache/pins", "GET", HandlePinList, kOpenAi, kAdmin},
    {"/v1/cache/pins", "DELETE", HandlePinDrop, kOpenAi, kAdmin},
    {"/v1/cache/pins/([^/]+)", "DELETE", HandlePinDrop, kOpenAi, kAdmin},
    {"/v1/cache/([^/]+)", "DELETE", HandleCacheDrop, kOpenAi, kAdmin},
    // It holds the engine and loads schemas.
    {"/v1/bench/savings", "POST", HandleSavings, kOpenAi, kAdmin},
    {"/v1/schemas", "GET", HandleSchemaList, kOpenAi, kAnyKey},
    {"/v1/schemas", "POST", HandleSchemaLoad, kOpenAi, kAdmin},
    {"/", "GET", HandleWeb, kOpenAi, kAnyKey},
    {"/ui/([^/]+)", "GET", HandleWeb, kOpenAi, kAnyKey},
    {"/v1/schemas/([^/]+)", "GET", HandleSchemaGet, kOpenAi, kAnyKey},
    {"/v1/schemas/([^/]+)", "DELETE", HandleSchemaDrop, kOpenAi, kAdmin},
};

// The patterns compiled once, as cpp-httplib matches them (the whole path).
const std::vector<std::regex>& Patterns() {
  static const std::vector<std::regex> patterns = [] {
    std::vector<std::regex> out;
    for (const Route& r : kRoutes) out.emplace_back(r.pattern);
    return out;
  }();
  return patterns;
}

// A pattern's text before its first regex character.
std::string FixedPrefix(const char* pattern) {
  std::string p = pattern;
  return p.substr(0, p.find_first_of("([.*+?\\^$|{"));
}

}  // namespace

std::span<const Route> Routes() { return kRoutes; }

bool AdminOnly(const std::string& method, const std::string& path) {
  const std::vector<std::regex>& patterns = Patterns();
  for (size_t i = 0; i < patterns.size(); ++i) {
    if (!std::regex_match(path, patterns[i])) continue;
    // The first matching pattern claims the path for every method, as cpp-httplib routes it.
    bool any_admin = false;
    for (size_t j = 0; j < patterns.size(); ++j) {
      if (std::string(kRoutes[j].pattern) != kRoutes[i].pattern) continue;
      if (method == kRoutes[j].method) return kRoutes[j].admin_only;
      any_admin |= kRoutes[j].admin_only;
    }
    return any_admin;
  }
  return false;
}

ApiFlavour FlavourOf(const std::string& path) {
  ApiFlavour flavour = ApiFlavour::kOpenAi;
  size_t longest = 0;
  for (const Route& r : kRoutes) {
    const std::string prefix = FixedPrefix(r.pattern);
    if (prefix.size() > longest && path.rfind(prefix, 0) == 0) {
      longest = prefix.size();
      flavour = r.flavour;
    }
  }
  return flavour;
}

}  // namespace promptcache
