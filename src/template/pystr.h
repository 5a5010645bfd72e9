// Python's str semantics on UTF-8 bytes: lengths and indices count code
// points, whitespace is str.isspace()'s (ASCII and the Unicode spaces), case
// mapping covers Latin, Greek, Cyrillic and Armenian (other scripts are left
// as they are; Greek final sigma is not special-cased).
// Invalid UTF-8 counts one code point per stray byte.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace edgelm::jinja::pystr {

// Byte length of the code point starting at s[i] (1 for a stray byte).
size_t cp_size(std::string_view s, size_t i);
size_t length(std::string_view s);  // len(s)
// Byte offsets of each code point, plus s.size() at the end.
std::vector<size_t> offsets(std::string_view s);
// If a whitespace code point starts at s[i], its byte length; else 0.
size_t space_at(std::string_view s, size_t i);
// Same, for the code point that ends at s[end] (exclusive).
size_t space_before(std::string_view s, size_t end);

// str.strip / lstrip / rstrip; chars == nullopt strips whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep, maxsplit) and rsplit; sep == nullopt splits on whitespace runs.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
// str.splitlines() (keepends=False).
std::vector<std::string> splitlines(std::string_view s);
// str.replace(old, new, count); count < 0 replaces all.
std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);  // str.capitalize()
std::string title(std::string_view s);       // str.title()
// Python's repr() of a str: '...' or "..." with \n, \t, \\, \xNN escapes.
void append_repr(std::string& out, std::string_view s);
// markupsafe.escape: & < > ' " as entities.
std::string html_escape(std::string_view s);
// Code point at offset i (for ord-like comparisons); stray bytes as themselves.
uint32_t decode_at(std::string_view s, size_t i);

}  // namespace edgelm::jinja::pystr
