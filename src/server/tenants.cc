#include "server/tenants.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace promptcache {
namespace {

std::string Hex(const unsigned char* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

std::string Sha256Hex(const std::string& s) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(s.data(), s.size(), md, &n, EVP_sha256(), nullptr);
  return Hex(md, n);
}

std::string Trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

}  // namespace

Result<std::map<std::string, std::string>> ParseApiKeys(const std::string& text,
                                                        const std::string& file) {
  std::map<std::string, std::string> keys;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = Trim(line);
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.find_first_of(" \t");
    const std::string key = line.substr(0, sp);
    std::string tenant = sp == std::string::npos ? "" : Trim(line.substr(sp));
    const std::string where = file + ":" + std::to_string(n) + ": ";
    if (tenant.find_first_of(" \t") != std::string::npos) {
      return InvalidArgument(where + "expected 'KEY [TENANT]', one key per line");
    }
    if (keys.count(key)) return InvalidArgument(where + "the key is listed twice");
    if (tenant.empty()) tenant = "key:" + Sha256Hex(key).substr(0, 16);
    keys[key] = tenant;
  }
  if (keys.empty()) return InvalidArgument(file + ": no API key in the file");
  return keys;
}

Result<std::map<std::string, std::string>> ReadApiKeysFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) return IoError("cannot read the API keys file " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ParseApiKeys(ss.str(), path);
}

std::string CacheNamespace(const std::string& secret, const std::string& tenant,
                           const std::string& salt) {
  if (tenant.empty() && salt.empty()) return "";
  // Lengths first: ("ab", "c") and ("a", "bc") never collide.
  const std::string msg =
      std::to_string(tenant.size()) + ":" + tenant + ":" + std::to_string(salt.size()) + ":" + salt;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), md, &n);
  return Hex(md, n);
}

Result<std::string> LoadCacheSecret(const std::string& file, const std::string& cache_dir,
                                    std::string* where) {
  auto read_first_line = [](const std::string& path, std::string* out) {
    std::ifstream f(path);
    if (!f) return false;
    std::getline(f, *out);
    *out = Trim(*out);
    return true;
  };
  std::string secret;
  if (!file.empty()) {
    if (!read_first_line(file, &secret)) return IoError("cannot read the cache secret " + file);
    if (secret.size() < 16) {
      return InvalidArgument("the cache secret in " + file + " is shorter than 16 characters");
    }
    *where = file;
    return secret;
  }
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return Internal("no random bytes for a secret");
  const std::string fresh = Hex(bytes, sizeof(bytes));
  if (cache_dir.empty()) {
    *where = "random, this process only";
    return fresh;
  }
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  const std::string path = cache_dir + "/cache-secret";
  *where = path;
  if (read_first_line(path, &secret) && secret.size() >= 16) return secret;
  // O_EXCL: two servers starting on one folder keep the same secret (the loser reads it).
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (read_first_line(path, &secret) && secret.size() >= 16) return secret;
    return IoError("cannot create the cache secret " + path);
  }
  const std::string line = fresh + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) == ssize_t(line.size());
  ::close(fd);
  if (!ok) return IoError("cannot write the cache secret " + path);
  return fresh;
}

}  // namespace promptcache
