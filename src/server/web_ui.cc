#include "server/web_ui.h"

namespace promptcache {

const WebAsset* FindWebAsset(std::string_view path) {
  if (path == "/") path = "/ui/index.html";
  for (size_t i = 0; i < kWebAssetCount; ++i) {
    if (kWebAssets[i].path == path) return &kWebAssets[i];
  }
  return nullptr;
}

bool IsWebPath(std::string_view path) { return path == "/" || path.starts_with("/ui/"); }

}  // namespace promptcache
