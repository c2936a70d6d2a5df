#include "kv/remote_tier.h"

namespace promptcache {

std::string RemoteKeyPrefix(const std::string& fingerprint, KvType type, int block_size) {
  return "pc:3:" + fingerprint + ":" + KvTypeName(type) + ":b" + std::to_string(block_size) + ":";
}

std::string RemoteKey(const std::string& prefix, const BlockKey& ns, const BlockKey& key) {
  return prefix + ns.Hex() + ":" + key.Hex();
}

}  // namespace promptcache
