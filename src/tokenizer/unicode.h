// UTF-8 helpers shared by the tokenizers, and the GPT-2 byte-level mapping.
//
// One policy for malformed UTF-8 everywhere: a byte that does not start a
// well-formed sequence (stray continuation, bad lead, truncated, overlong,
// surrogate, above U+10FFFF) becomes one U+FFFD and decoding resumes at the
// next byte. The BPE pre-split and Utf8Stream both use it, so streamed output
// and a whole-string conversion always agree.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/utf8.h"

namespace edgelm::tokenizer {

using edgelm::kReplacementChar;
inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";         // U+2581 '▁'

struct Utf8Char {
  uint32_t cp = 0;   // the code point, or U+FFFD when !valid
  uint32_t len = 1;  // bytes consumed: the sequence, or 1 when !valid
  bool valid = false;
};

// Decodes the sequence starting at s[i] (i < s.size()).
Utf8Char utf8_decode(std::string_view s, size_t i);

// How a possibly incomplete sequence at the end of a buffer stands.
enum class Utf8Prefix {
  kComplete,    // a whole well-formed sequence (length in *len)
  kIncomplete,  // a proper prefix of some well-formed sequence: wait for more bytes
  kInvalid,     // can never become well-formed: the first byte is one U+FFFD
};
Utf8Prefix utf8_classify(std::string_view s, size_t i, size_t* len);

// Bytes of the character at s[i] for splitting text into merge symbols: a
// well-formed sequence is one symbol, any other byte is a symbol of its own.
// (llama.cpp trusts the lead byte alone, which lets a stray lead byte swallow
// the bytes after it; for valid UTF-8 both agree.)
inline size_t utf8_symbol_len(std::string_view s, size_t i) {
  if (static_cast<uint8_t>(s[i]) < 0x80) return 1;
  size_t n = 1;
  return utf8_classify(s, i, &n) == Utf8Prefix::kComplete ? n : 1;
}

// utf8_append: core/utf8.h.
using edgelm::utf8_append;

bool utf8_is_valid(std::string_view s);
// Appends s to out with each malformed byte replaced by U+FFFD.
void utf8_sanitize_append(std::string& out, std::string_view s);

// GPT-2 byte-level BPE alphabet: each byte is drawn as a printable code point
// (printable Latin-1 bytes as themselves, the rest as U+0100 + n).
// UTF-8 text of the code point that stands for byte b.
std::string_view byte_to_unicode(uint8_t b);
// The byte a code point stands for, or -1 when it is not in the alphabet.
int unicode_to_byte(uint32_t cp);

}  // namespace edgelm::tokenizer
