#include "tokenizer/unicode.h"

namespace edgelm::tokenizer {

Utf8Prefix utf8_classify(std::string_view s, size_t i, size_t* len) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    *len = 1;
    return Utf8Prefix::kComplete;
  }
  size_t n;
  // Allowed range of the second byte; later continuation bytes are 80..BF.
  // The narrowed ranges exclude overlong forms, surrogates and > U+10FFFF.
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return Utf8Prefix::kInvalid;
  }
  for (size_t k = 1; k < n; ++k) {
    if (i + k >= s.size()) return Utf8Prefix::kIncomplete;
    const auto b = static_cast<uint8_t>(s[i + k]);
    const uint8_t klo = k == 1 ? lo : 0x80, khi = k == 1 ? hi : 0xBF;
    if (b < klo || b > khi) return Utf8Prefix::kInvalid;
  }
  *len = n;
  return Utf8Prefix::kComplete;
}

Utf8Char utf8_decode(std::string_view s, size_t i) {
  size_t n = 1;
  if (utf8_classify(s, i, &n) != Utf8Prefix::kComplete) return Utf8Char{0xFFFD, 1, false};
  const auto* p = reinterpret_cast<const uint8_t*>(s.data() + i);
  uint32_t cp;
  switch (n) {
    case 1: cp = p[0]; break;
    case 2: cp = (uint32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F); break;
    case 3: cp = (uint32_t(p[0] & 0x0F) << 12) | (uint32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F); break;
    default:
      cp = (uint32_t(p[0] & 0x07) << 18) | (uint32_t(p[1] & 0x3F) << 12) | (uint32_t(p[2] & 0x3F) << 6) |
           (p[3] & 0x3F);
  }
  return Utf8Char{cp, static_cast<uint32_t>(n), true};
}

bool utf8_is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t n = 1;
    if (utf8_classify(s, i, &n) != Utf8Prefix::kComplete) return false;
    i += n;
  }
  return true;
}

void utf8_sanitize_append(std::string& out, std::string_view s) {
  size_t i = 0, run = 0;  // [run, i) is valid and not yet copied
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t n = 1;
    if (utf8_classify(s, i, &n) == Utf8Prefix::kComplete) {
      i += n;
      continue;
    }
    out.append(s.substr(run, i - run));
    out.append(kReplacementChar);
    run = ++i;
  }
  out.append(s.substr(run));
}

namespace {

struct ByteMap {
  std::array<std::string, 256> to_unicode;
  std::array<int16_t, 512> to_byte;  // every mapped code point is below U+0200

  ByteMap() {
    to_byte.fill(-1);
    uint32_t extra = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const uint32_t cp = printable ? b : 256 + extra++;
      utf8_append(to_unicode[b], cp);
      to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

std::string_view byte_to_unicode(uint8_t b) { return byte_map().to_unicode[b]; }

int unicode_to_byte(uint32_t cp) { return cp < 512 ? byte_map().to_byte[cp] : -1; }

}  // namespace edgelm::tokenizer
