#include "server/cors.h"

#include <gtest/gtest.h>

namespace promptcache {
namespace {

TEST(Cors, OnlyListedOriginsAreAllowed) {
  const std::vector<std::string> allowed = {"https://app.example", "http://localhost:3000/"};
  EXPECT_EQ(CorsAllowOrigin(allowed, "https://app.example"), "https://app.example");
  EXPECT_EQ(CorsAllowOrigin(allowed, "HTTPS://APP.EXAMPLE"), "HTTPS://APP.EXAMPLE");
  EXPECT_EQ(CorsAllowOrigin(allowed, "http://localhost:3000"), "http://localhost:3000");
  EXPECT_EQ(CorsAllowOrigin(allowed, "https://evil.example"), "");
  EXPECT_EQ(CorsAllowOrigin(allowed, "https://app.example.evil"), "");
  EXPECT_EQ(CorsAllowOrigin(allowed, "http://localhost:3001"), "");
  EXPECT_EQ(CorsAllowOrigin(allowed, ""), "");
  EXPECT_EQ(CorsAllowOrigin({}, "https://app.example"), "");
  EXPECT_EQ(CorsAllowOrigin({"*"}, "https://any.example"), "*");
  EXPECT_EQ(CorsAllowOrigin({"*"}, ""), "");
}

TEST(Cors, PreflightAllowsTheApisHeadersAndWhatIsAsked) {
  auto h =
      CorsPreflightHeaders("https://app.example", "X-Stainless-OS, content-type,  ,bad header");
  EXPECT_EQ(h["Access-Control-Allow-Origin"], "https://app.example");
  EXPECT_EQ(h["Access-Control-Allow-Methods"], "GET, POST, DELETE, OPTIONS");
  EXPECT_EQ(h["Access-Control-Allow-Headers"],
            "authorization, x-api-key, anthropic-version, anthropic-beta, content-type, "
            "x-stainless-os");
  EXPECT_EQ(h["Vary"], "Origin");
  EXPECT_FALSE(h["Access-Control-Max-Age"].empty());
}

}  // namespace
}  // namespace promptcache
