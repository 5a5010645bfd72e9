// Byte sizes as people write them ("2GiB", "512MiB", "1.5G") and as we print them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace edgelm {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint64_t kGiB = 1024 * kMiB;

// Accepts an integer or decimal number followed by an optional unit:
// B, K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB (case-insensitive). Decimal units
// (KB, MB, ...) are powers of 1000; binary ones (KiB, K, ...) powers of 1024.
Result<uint64_t> parse_bytes(std::string_view text);

// "224.0 MiB", "1.09 GiB", "512 B".
std::string format_bytes(uint64_t n);

}  // namespace edgelm
