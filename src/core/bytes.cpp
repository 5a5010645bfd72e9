#include "core/bytes.h"

#include <cctype>
#include <cmath>
#include <string>

namespace edgelm {

Result<uint64_t> parse_bytes(std::string_view text) {
  std::string s(text);
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) return make_error("invalid size '{}': expected a number such as 2GiB or 512MiB", text);
  double num = 0;
  try {
    size_t used = 0;
    num = std::stod(s.substr(0, i), &used);
    if (used != i) throw std::invalid_argument("x");
  } catch (...) {
    return make_error("invalid size '{}': bad number", text);
  }
  std::string unit;
  for (size_t k = i; k < s.size(); ++k) {
    if (s[k] == ' ') continue;
    unit.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(s[k]))));
  }
  double mult = 0;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kib") mult = 1024.0;
  else if (unit == "kb") mult = 1e3;
  else if (unit == "m" || unit == "mib") mult = 1024.0 * 1024;
  else if (unit == "mb") mult = 1e6;
  else if (unit == "g" || unit == "gib") mult = 1024.0 * 1024 * 1024;
  else if (unit == "gb") mult = 1e9;
  else if (unit == "t" || unit == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "tb") mult = 1e12;
  else return make_error("invalid size '{}': unknown unit '{}' (use B, KiB, MiB, GiB, KB, MB, GB)", text, unit);
  const double bytes = num * mult;
  if (!std::isfinite(bytes) || bytes > 1.8e19) return make_error("invalid size '{}': too large", text);
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string format_bytes(uint64_t n) {
  if (n < kKiB) return fmt::format("{} B", n);
  if (n < kMiB) return fmt::format("{:.1f} KiB", static_cast<double>(n) / kKiB);
  if (n < kGiB) return fmt::format("{:.1f} MiB", static_cast<double>(n) / kMiB);
  return fmt::format("{:.2f} GiB", static_cast<double>(n) / kGiB);
}

}  // namespace edgelm
