// Base64 (RFC 4648, the standard alphabet with '=' padding), for the server's JSON fields that
// carry bytes: embeddings as little-endian floats, and the Responses API's reasoning items'
// `encrypted_content`.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace promptcache {

std::string Base64Encode(std::string_view bytes);
// nullopt when `text` is not padded base64 of the standard alphabet.
std::optional<std::string> Base64Decode(std::string_view text);

}  // namespace promptcache
