#include "kv/remote_tier.h"

#include <algorithm>

namespace promptcache {

void RemoteTier::Stream(const std::vector<std::string>& keys, int window,
                        const std::function<bool(std::optional<RemoteValue>)>& use) {
  const size_t step = static_cast<size_t>(std::max(1, window));
  for (size_t first = 0; first < keys.size(); first += step) {
    const size_t end = std::min(keys.size(), first + step);
    std::vector<std::optional<RemoteValue>> values =
        Get(std::vector<std::string>(keys.begin() + first, keys.begin() + end));
    for (std::optional<RemoteValue>& v : values) {
      if (!use(std::move(v))) return;
    }
  }
}

std::string RemoteKeyPrefix(const std::string& fingerprint, KvType type, int block_size) {
  return "pc:3:" + fingerprint + ":" + KvTypeName(type) + ":b" + std::to_string(block_size) + ":";
}

std::string RemoteKey(const std::string& prefix, const BlockKey& ns, const BlockKey& key) {
  return prefix + ns.Hex() + ":" + key.Hex();
}

}  // namespace promptcache
