#include "tokenizer/utf8.h"

#include <utf8proc.h>

#include <array>
#include <cstdlib>

namespace promptcache::utf8 {

Seq Next(const unsigned char* s, size_t n) {
  const unsigned char b0 = s[0];
  if (b0 < 0x80) return {SeqState::kValid, 1};
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return {SeqState::kInvalid, 1};
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= n) return {SeqState::kIncomplete, n};
    const unsigned char b = s[i];
    const bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return {SeqState::kInvalid, i};
  }
  return {SeqState::kValid, need};
}

void Append(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t DecodeValid(std::string_view s, size_t pos, size_t len) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + pos;
  if (len == 1) return p[0];
  uint32_t cp = p[0] & (0xFF >> (len + 1));
  for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (p[i] & 0x3F);
  return cp;
}

std::string Sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    Seq q = Next(s, i);
    if (q.state == SeqState::kValid) {
      out.append(s.substr(i, q.len));
    } else {
      out.append(kReplacement);
    }
    i += q.len;
  }
  return out;
}

namespace {

bool IsPrintableByte(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteTables {
  std::array<uint32_t, 256> to_cp;
  std::array<int16_t, 324> to_byte;  // the largest stand-in is U+0100 + 67
  ByteTables() {
    to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      to_cp[b] = IsPrintableByte(b) ? static_cast<uint32_t>(b) : next++;
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteTables& Tables() {
  static const ByteTables tables;
  return tables;
}

}  // namespace

uint32_t ByteToCodepoint(uint8_t b) { return Tables().to_cp[b]; }

int CodepointToByte(uint32_t cp) {
  return cp < Tables().to_byte.size() ? Tables().to_byte[cp] : -1;
}

namespace {

// NFC of valid UTF-8 (as checked by Next).
void AppendNfc(std::string_view valid, std::string* out) {
  bool ascii = true;
  for (char c : valid) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) {  // ASCII is its own normal form
    out->append(valid);
    return;
  }
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(valid.data()),
                   static_cast<utf8proc_ssize_t>(valid.size()), &dst,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {  // cannot happen for valid input; keep the text rather than lose it
    out->append(valid);
  } else {
    out->append(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
  }
  std::free(dst);
}

}  // namespace

std::string Nfc(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t run = 0;  // start of the current valid stretch
  for (size_t pos = 0; pos < s.size();) {
    const Seq q = Next(s, pos);
    if (q.state == SeqState::kValid) {
      pos += q.len;
      continue;
    }
    AppendNfc(s.substr(run, pos - run), &out);
    out.append(s.substr(pos, q.len));
    pos += q.len;
    run = pos;
  }
  AppendNfc(s.substr(run), &out);
  return out;
}

bool IsWhiteSpace(uint32_t cp) {
  if (cp >= 0x09 && cp <= 0x0D) return true;
  if (cp >= 0x2000 && cp <= 0x200A) return true;
  switch (cp) {
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return false;
  }
}

}  // namespace promptcache::utf8
