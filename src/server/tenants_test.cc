#include "server/tenants.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace promptcache {
namespace {

TEST(Tenants, ApiKeysFile) {
  auto keys = ParseApiKeys("# comment\nkey-a alice\n\nkey-b  bob \nkey-c\n", "f");
  ASSERT_TRUE(keys.ok()) << keys.status().message();
  EXPECT_EQ(keys->at("key-a"), "alice");
  EXPECT_EQ(keys->at("key-b"), "bob");
  EXPECT_EQ(keys->at("key-c").rfind("key:", 0), 0u);  // a tenant of its own
  EXPECT_EQ(ParseApiKeys("a x\na y\n", "f").status().message(), "f:2: the key is listed twice");
  EXPECT_FALSE(ParseApiKeys("a b c\n", "f").ok());
  EXPECT_FALSE(ParseApiKeys("# nothing\n", "f").ok());
}

TEST(Tenants, NamespacesAreKeyedAndDistinct) {
  EXPECT_EQ(CacheNamespace("s", "", ""), "");
  const std::string a = CacheNamespace("secret", "alice", "");
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a, CacheNamespace("secret", "alice", ""));
  EXPECT_NE(a, CacheNamespace("other", "alice", ""));
  EXPECT_NE(a, CacheNamespace("secret", "bob", ""));
  EXPECT_NE(a, CacheNamespace("secret", "alice", "salt"));
  EXPECT_NE(CacheNamespace("s", "ab", "c"), CacheNamespace("s", "a", "bc"));
  EXPECT_NE(CacheNamespace("s", "", "x"), "");
}

TEST(Tenants, SecretKeptInTheCacheFolder) {
  const auto dir = std::filesystem::temp_directory_path() / "pc-tenants-test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::string where;
  auto s1 = LoadCacheSecret("", dir.string(), &where);
  ASSERT_TRUE(s1.ok());
  EXPECT_EQ(where, (dir / "cache-secret").string());
  EXPECT_EQ(std::filesystem::status(dir / "cache-secret").permissions() &
                std::filesystem::perms::others_read,
            std::filesystem::perms::none);
  auto s2 = LoadCacheSecret("", dir.string(), &where);
  EXPECT_EQ(*s1, *s2);
  auto s3 = LoadCacheSecret("", "", &where);
  EXPECT_NE(*s3, *s1);
  EXPECT_FALSE(LoadCacheSecret((dir / "missing").string(), "", &where).ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace promptcache
