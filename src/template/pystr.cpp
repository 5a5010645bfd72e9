#include "template/pystr.h"

#include <algorithm>

#include "core/utf8.h"

namespace edgelm::jinja::pystr {

size_t cp_size(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) n = 3;
  else if (c >= 0xF0 && c <= 0xF4) n = 4;
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  return n;
}

uint32_t decode_at(std::string_view s, size_t i) {
  const size_t n = cp_size(s, i);
  const auto c = static_cast<unsigned char>(s[i]);
  if (n == 1) return c;
  uint32_t cp = c & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += cp_size(s, i)) ++n;
  return n;
}

std::vector<size_t> offsets(std::string_view s) {
  std::vector<size_t> o;
  o.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); i += cp_size(s, i)) o.push_back(i);
  o.push_back(s.size());
  return o;
}

namespace {
bool is_space_cp(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}
}  // namespace

size_t space_at(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  const size_t n = cp_size(s, i);
  if (n == 1 && static_cast<unsigned char>(s[i]) >= 0x80) return 0;
  return is_space_cp(decode_at(s, i)) ? n : 0;
}

size_t space_before(std::string_view s, size_t end) {
  if (end == 0) return 0;
  // Step back over continuation bytes (at most 3) to the lead byte.
  size_t start = end - 1;
  while (start > 0 && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  if (cp_size(s, start) != end - start) start = end - 1;
  return space_at(s, start) == end - start ? end - start : 0;
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (!chars) {
    if (left)
      while (b < e) {
        const size_t n = space_at(s, b);
        if (n == 0) break;
        b += n;
      }
    if (right)
      while (e > b) {
        const size_t n = space_before(s, e);
        if (n == 0) break;
        e -= n;
      }
    return std::string(s.substr(b, e - b));
  }
  // Strip any of the code points in chars.
  std::vector<std::string_view> set;
  for (size_t i = 0; i < chars->size(); i += cp_size(*chars, i))
    set.push_back(std::string_view(*chars).substr(i, cp_size(*chars, i)));
  auto in_set = [&](std::string_view cp) { return std::find(set.begin(), set.end(), cp) != set.end(); };
  if (left)
    while (b < e) {
      const size_t n = cp_size(s, b);
      if (!in_set(s.substr(b, n))) break;
      b += n;
    }
  if (right)
    while (e > b) {
      size_t st = e - 1;
      while (st > b && e - st < 4 && (static_cast<unsigned char>(s[st]) & 0xC0) == 0x80) --st;
      if (cp_size(s, st) != e - st) st = e - 1;
      if (!in_set(s.substr(st, e - st))) break;
      e = st;
    }
  return std::string(s.substr(b, e - b));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (!sep) {
    size_t i = 0;
    while (true) {
      while (i < s.size() && space_at(s, i)) i += space_at(s, i);
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        // The rest, with trailing whitespace kept (as Python does).
        out.emplace_back(s.substr(i));
        break;
      }
      size_t j = i;
      while (j < s.size() && !space_at(s, j)) j += cp_size(s, j);
      out.emplace_back(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  size_t i = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) break;
    const size_t k = s.find(*sep, i);
    if (k == std::string_view::npos) break;
    out.emplace_back(s.substr(i, k - i));
    i = k + sep->size();
  }
  out.emplace_back(s.substr(i));
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (maxsplit < 0) return split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (!sep) {
    size_t e = s.size();
    while (true) {
      while (e > 0 && space_before(s, e)) e -= space_before(s, e);
      if (e == 0) break;
      if (static_cast<int64_t>(out.size()) == maxsplit) {
        out.emplace_back(s.substr(0, e));
        break;
      }
      size_t b = e;
      while (b > 0 && !space_before(s, b)) --b;
      out.emplace_back(s.substr(b, e - b));
      e = b;
    }
    std::reverse(out.begin(), out.end());
    return out;
  }
  size_t e = s.size();
  while (static_cast<int64_t>(out.size()) < maxsplit && e >= sep->size()) {
    const size_t k = s.substr(0, e).rfind(*sep);
    if (k == std::string_view::npos) break;
    out.emplace_back(s.substr(k + sep->size(), e - k - sep->size()));
    e = k;
  }
  out.emplace_back(s.substr(0, e));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> splitlines(std::string_view s) {
  std::vector<std::string> out;
  size_t b = 0, i = 0;
  while (i < s.size()) {
    const size_t n = cp_size(s, i);
    const uint32_t cp = decode_at(s, i);
    const bool brk = (n == 1 && (cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
                                 cp == 0x1E)) ||
                     (n > 1 && (cp == 0x85 || cp == 0x2028 || cp == 0x2029));
    if (!brk) {
      i += n;
      continue;
    }
    out.emplace_back(s.substr(b, i - b));
    i += n;
    if (cp == '\r' && i < s.size() && s[i] == '\n') ++i;
    b = i;
  }
  if (b < s.size()) out.emplace_back(s.substr(b));
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts repl before every code point and at the end.
    int64_t done = 0;
    size_t i = 0;
    while (i <= s.size()) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (i == s.size()) break;
      const size_t n = cp_size(s, i);
      out += s.substr(i, n);
      i += n;
    }
    return out;
  }
  size_t i = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t k = s.find(old, i);
    if (k == std::string_view::npos) break;
    out += s.substr(i, k - i);
    out += repl;
    i = k + old.size();
    ++done;
  }
  out += s.substr(i);
  return out;
}

namespace {

// Simple case mapping of the scripts chat text is mostly written in: ASCII,
// Latin-1, Latin Extended-A, Greek, Cyrillic, Armenian, fullwidth Latin.
// Returns cp itself when it has no mapping. (Python's full mapping also has
// one-to-many cases such as German sharp s, handled by the callers.)
uint32_t to_upper_cp(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 0) ? c - 1 : c;
    if (c == 0x130 || c == 0x138 || c == 0x149) return c;
    return (c % 2 == 1) ? c - 1 : c;
  }
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF) || (c >= 0x4D0 && c <= 0x4FF))
    return (c % 2 == 1) ? c - 1 : c;
  if (c >= 0x561 && c <= 0x586) return c - 48;
  if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
  return c;
}

uint32_t to_lower_cp(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x130) return 'i';  // Python gives i + U+0307; rare enough
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 1) ? c + 1 : c;
    if (c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F) return c;
    return (c % 2 == 0) ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF) || (c >= 0x4D0 && c <= 0x4FF))
    return (c % 2 == 0) ? c + 1 : c;
  if (c >= 0x531 && c <= 0x556) return c + 48;
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
  return c;
}

// Appends the upper (or lower) case of the code point at s[i]; returns its byte length.
size_t map_case(std::string& out, std::string_view s, size_t i, bool upper) {
  const size_t n = cp_size(s, i);
  if (n == 1 && static_cast<unsigned char>(s[i]) >= 0x80) {
    out.push_back(s[i]);  // a stray byte stays
    return 1;
  }
  const uint32_t cp = decode_at(s, i);
  if (upper && cp == 0xDF) {
    out += "SS";
    return n;
  }
  utf8_append(out, upper ? to_upper_cp(cp) : to_lower_cp(cp), /*keep_surrogates=*/true);
  return n;
}

bool is_cased(std::string_view s, size_t i) {
  const uint32_t cp = decode_at(s, i);
  return to_upper_cp(cp) != cp || to_lower_cp(cp) != cp || cp == 0xDF;
}

std::string map_all(std::string_view s, bool upper) {
  std::string o;
  o.reserve(s.size());
  for (size_t i = 0; i < s.size();) i += map_case(o, s, i, upper);
  return o;
}

}  // namespace

std::string upper(std::string_view s) { return map_all(s, true); }
std::string lower(std::string_view s) { return map_all(s, false); }
std::string capitalize(std::string_view s) {
  std::string o;
  for (size_t i = 0; i < s.size();) i += map_case(o, s, i, i == 0);
  return o;
}
std::string title(std::string_view s) {
  std::string o;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    const bool cased = is_cased(s, i);
    i += map_case(o, s, i, cased && !prev_cased);
    prev_cased = cased;
  }
  return o;
}

void append_repr(std::string& out, std::string_view s) {
  const bool has_sq = s.find('\'') != std::string_view::npos;
  const bool has_dq = s.find('"') != std::string_view::npos;
  const char q = (has_sq && !has_dq) ? '"' : '\'';
  out.push_back(q);
  static const char* hex = "0123456789abcdef";
  for (size_t i = 0; i < s.size();) {
    const size_t n = cp_size(s, i);
    const auto c = static_cast<unsigned char>(s[i]);
    if (n > 1) {
      const uint32_t cp = decode_at(s, i);
      // The non-printable code points Python escapes that chat text may hold
      // (C1 controls, Unicode spaces, format characters); all others as they are.
      if (cp <= 0xA0 || cp == 0xAD || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) ||
          (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x2064) || cp == 0x3000 || cp == 0xFEFF) {
        if (cp < 0x100) {
          out += "\\x";
          out.push_back(hex[cp >> 4]);
          out.push_back(hex[cp & 15]);
        } else {
          out += "\\u";
          for (int k = 12; k >= 0; k -= 4) out.push_back(hex[(cp >> k) & 15]);
        }
      } else {
        out += s.substr(i, n);
      }
      i += n;
      continue;
    }
    if (c == static_cast<unsigned char>(q) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c >= 0x7F) {
      // Controls, and stray bytes (Python would hold a surrogate escape here).
      out += "\\x";
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    } else {
      out.push_back(static_cast<char>(c));
    }
    ++i;
  }
  out.push_back(q);
}

std::string html_escape(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '\'': o += "&#39;"; break;
      case '"': o += "&#34;"; break;
      default: o.push_back(c);
    }
  }
  return o;
}

}  // namespace edgelm::jinja::pystr
