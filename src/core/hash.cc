#include "core/hash.h"

#include <xxhash.h>

#include <cstdio>

#include "core/check.h"

namespace promptcache {

uint64_t Hash64(const void* data, size_t n, uint64_t seed) {
  return XXH3_64bits_withSeed(data, n, seed);
}

Hasher128::Hasher128() : state_(XXH3_createState()) {
  PC_CHECK(state_ != nullptr);
  XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_));
}

Hasher128::~Hasher128() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void Hasher128::Update(const void* data, size_t n) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), data, n);
}

void Hasher128::Update(std::string_view s) {
  const uint64_t n = s.size();
  Update(&n, sizeof(n));  // length-prefixed, so ("ab","c") and ("a","bc") differ
  Update(s.data(), s.size());
}

void Hasher128::Digest(uint64_t out[2]) const {
  const XXH128_hash_t h = XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_));
  out[0] = h.high64;
  out[1] = h.low64;
}

std::string Hasher128::HexDigest() const {
  uint64_t d[2];
  Digest(d);
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(d[0]),
                static_cast<unsigned long long>(d[1]));
  return buf;
}

}  // namespace promptcache
