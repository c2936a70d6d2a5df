// UTF-8 helpers shared by the tokenizers: strict decoding of one sequence (so that invalid input is
// recognised, never read past its end), and GPT-2's byte-level alphabet, which maps each of the 256
// byte values to a printable character so that byte-level BPE vocabularies are plain text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace promptcache::utf8 {

enum class SeqState { kValid, kIncomplete, kInvalid };

struct Seq {
  SeqState state;
  // kValid: the sequence's length; kIncomplete: all n bytes (a valid prefix cut short by the end);
  // kInvalid: the maximal invalid subpart (>= 1), to be replaced by one U+FFFD.
  size_t len;
};

// Examines the sequence starting at s[0] (n >= 1 bytes available). Rejects overlong forms,
// surrogates and code points above U+10FFFF.
Seq Next(const unsigned char* s, size_t n);
inline Seq Next(std::string_view s, size_t pos) {
  return Next(reinterpret_cast<const unsigned char*>(s.data()) + pos, s.size() - pos);
}

// Length of the character at s[pos]: the sequence length when valid, else 1.
inline size_t CharLen(std::string_view s, size_t pos) {
  Seq q = Next(s, pos);
  return q.state == SeqState::kValid ? q.len : 1;
}

// Appends the UTF-8 encoding of `cp` (<= 0x10FFFF).
void Append(uint32_t cp, std::string* out);

// Decodes the valid sequence at s[pos] (state kValid assumed) into a code point.
uint32_t DecodeValid(std::string_view s, size_t pos, size_t len);

// Text with every invalid or incomplete sequence replaced by U+FFFD.
std::string Sanitize(std::string_view s);

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Unicode normalization form C (canonical composition) of the valid stretches of `s`; invalid
// bytes pass through unchanged. Qwen2's tokenizers normalize their input this way.
std::string Nfc(std::string_view s);

// Whether `cp` has the Unicode White_Space property (what Hugging Face's lstrip/rstrip remove).
bool IsWhiteSpace(uint32_t cp);

// GPT-2's bytes_to_unicode: printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for
// themselves, the other 68 become U+0100 onwards in byte order.
uint32_t ByteToCodepoint(uint8_t b);
// The inverse; -1 for code points that stand for no byte.
int CodepointToByte(uint32_t cp);

}  // namespace promptcache::utf8
