// Content hashing (XXH3, 64 and 128 bit) for model fingerprints and cache keys.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace promptcache {

uint64_t Hash64(const void* data, size_t n, uint64_t seed = 0);

// Incremental 128-bit hash, printed as 32 hex digits; used where a collision would silently
// serve wrong K/V (model fingerprints, cache block keys).
class Hasher128 {
 public:
  Hasher128();
  ~Hasher128();
  Hasher128(const Hasher128&) = delete;
  Hasher128& operator=(const Hasher128&) = delete;
  void Update(const void* data, size_t n);
  void Update(std::string_view s);
  template <typename T>
  void UpdatePod(const T& v) {
    Update(&v, sizeof(T));
  }
  std::string HexDigest() const;
  void Digest(uint64_t out[2]) const;

 private:
  void* state_;
};

}  // namespace promptcache
