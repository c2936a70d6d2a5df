// Cross-origin requests (--cors ORIGIN): which browser origins may call the API, and the
// headers their requests and preflights get. Pure functions of the allowed list and a
// request's headers, so that the rules are unit-tested without a server.
//
// Without --cors the server sends no CORS header at all (a browser page of another origin
// cannot read its answers). With it, a request whose Origin is listed (or any, with "*") gets
// Access-Control-Allow-Origin, and its preflight (OPTIONS with Access-Control-Request-Method) is
// answered before authentication, since browsers send preflights without credentials: the
// methods the API uses and the headers its clients send (authorization, x-api-key,
// anthropic-version, content-type, and whatever else the preflight asks for: the official SDKs
// add their own). Other origins get nothing, so the browser keeps blocking them.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace promptcache {

// The Access-Control-Allow-Origin value for a request from `origin`: "*" when any origin is
// allowed, `origin` when it is listed, "" when it is not allowed (or there is no Origin).
std::string CorsAllowOrigin(const std::vector<std::string>& allowed, const std::string& origin);

// The headers of a preflight's answer from an allowed origin (`allow_origin` from
// CorsAllowOrigin), given the headers it asks for (Access-Control-Request-Headers).
std::map<std::string, std::string> CorsPreflightHeaders(const std::string& allow_origin,
                                                        const std::string& requested_headers);

}  // namespace promptcache
