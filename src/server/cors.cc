#include "server/cors.h"

#include <algorithm>
#include <cctype>
#include <string_view>

namespace promptcache {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A header name as a preflight may list it: letters, digits and the token punctuation.
bool IsToken(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("-_.!#$%&'*+^`|~").find(c) != std::string_view::npos;
  });
}

}  // namespace

std::string CorsAllowOrigin(const std::vector<std::string>& allowed, const std::string& origin) {
  if (origin.empty()) return "";
  for (const std::string& a : allowed) {
    if (a == "*") return "*";
    // Origins compare as scheme://host[:port], case-insensitively; a trailing slash is a typo.
    std::string want = Lower(a);
    while (!want.empty() && want.back() == '/') want.pop_back();
    if (want == Lower(origin)) return origin;
  }
  return "";
}

std::map<std::string, std::string> CorsPreflightHeaders(const std::string& allow_origin,
                                                        const std::string& requested_headers) {
  std::vector<std::string> headers = {"authorization", "x-api-key", "anthropic-version",
                                      "anthropic-beta", "content-type"};
  size_t start = 0;
  while (start <= requested_headers.size()) {
    size_t end = requested_headers.find(',', start);
    if (end == std::string::npos) end = requested_headers.size();
    std::string h = requested_headers.substr(start, end - start);
    h.erase(0, h.find_first_not_of(" \t"));
    h.erase(h.find_last_not_of(" \t") + 1);
    h = Lower(h);
    if (IsToken(h) && std::find(headers.begin(), headers.end(), h) == headers.end()) {
      headers.push_back(h);
    }
    start = end + 1;
  }
  std::string list;
  for (const std::string& h : headers) list += (list.empty() ? "" : ", ") + h;
  return {{"Access-Control-Allow-Origin", allow_origin},
          {"Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS"},
          {"Access-Control-Allow-Headers", list},
          {"Access-Control-Max-Age", "600"},
          {"Vary", "Origin"}};
}

}  // namespace promptcache
