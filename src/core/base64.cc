#include "core/base64.h"

#include <cstdint>

namespace promptcache {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t group = uint32_t(uint8_t(bytes[i])) << 16;
    if (n > 1) group |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    if (n > 2) group |= uint8_t(bytes[i + 2]);
    out += kAlphabet[(group >> 18) & 63];
    out += kAlphabet[(group >> 12) & 63];
    out += n > 1 ? kAlphabet[(group >> 6) & 63] : '=';
    out += n > 2 ? kAlphabet[group & 63] : '=';
  }
  return out;
}

std::optional<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    if (pad == 1 && text[i + 2] == '=') return std::nullopt;  // "x=y=" is no padding
    uint32_t group = 0;
    for (int j = 0; j < 4; ++j) {
      const int v = j >= 4 - pad ? 0 : Value(text[i + j]);
      if (v < 0) return std::nullopt;
      group = group << 6 | uint32_t(v);
    }
    out += char(group >> 16);
    if (pad < 2) out += char(group >> 8 & 255);
    if (pad < 1) out += char(group & 255);
  }
  return out;
}

}  // namespace promptcache
