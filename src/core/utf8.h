// UTF-8 encoding of one code point, shared by the tokenizer and the
// template interpreter's string methods.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace edgelm {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Appends `cp` as UTF-8. A value past U+10FFFF becomes U+FFFD; so does a
// surrogate (U+D800..U+DFFF), which UTF-8 cannot carry, unless
// `keep_surrogates`: the template interpreter keeps a lone surrogate of a
// "\ud800" escape as its three bytes (as Python keeps it in a str), so that
// it can be escaped again as it came.
void utf8_append(std::string& out, uint32_t cp, bool keep_surrogates = false);

}  // namespace edgelm
