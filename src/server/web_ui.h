// The web page `promptcache serve` answers at GET / (docs/server.md, "The web page"): a chat
// with the model, each response's cache map, the prefix cache as a tree, the loaded schemas
// with a prompt composer, and live metrics. Plain HTML, CSS and JavaScript from web/, compiled
// into the binary at build time (cmake/EmbedFiles.cmake), so the page works with no files
// beside the binary and no network; it talks to the same server's API.
//
// The page and its assets need no API key (they hold no data); the page asks for the key when
// the API answers 401 and keeps it in the tab's memory only.
#pragma once

#include <cstddef>
#include <string_view>

namespace promptcache {

struct WebAsset {
  std::string_view path;  // "/ui/index.html"
  std::string_view content_type;
  std::string_view body;
};

// Defined by the generated web_assets.cc.
extern const WebAsset kWebAssets[];
extern const size_t kWebAssetCount;

// The asset served at `path`: "/" is /ui/index.html. Null when there is none.
const WebAsset* FindWebAsset(std::string_view path);

// Whether `path` is the page or one of its assets (served without the API key).
bool IsWebPath(std::string_view path);

}  // namespace promptcache
