// fp16 / bf16 <-> fp32 conversions: hand-picked values, every half value, and
// the compiler's own conversions as an independent oracle where it has them.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "kernels/kernels.h"

namespace edgelm::kernels {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Fp16, KnownValues) {
  EXPECT_EQ(fp32_to_fp16(0.0f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(fp32_to_fp16(0.1f), 0x2e66);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);    // largest finite half
  EXPECT_EQ(fp32_to_fp16(65519.996f), 0x7bff);  // just below the rounding edge
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);    // the edge rounds to +inf
  EXPECT_EQ(fp32_to_fp16(1e10f), 0x7c00);
  EXPECT_EQ(fp32_to_fp16(-1e10f), 0xfc00);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (0)
  EXPECT_EQ(fp32_to_fp16(std::ldexp(3.0f, -25)), 0x0002);  // tie -> even (2)
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);
  // 2^-14 - 2^-25 is a tie between the largest subnormal and the smallest normal.
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)), 0x0400);
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(fp32_to_fp16(-std::numeric_limits<float>::infinity()), 0xfc00);
  const uint16_t nan = fp32_to_fp16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);

  EXPECT_EQ(fp16_to_fp32(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_fp32(0xc000), -2.0f);
  EXPECT_EQ(fp16_to_fp32(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_fp32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(fp16_to_fp32(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(bits(fp16_to_fp32(0x8000)), 0x80000000u);
  EXPECT_TRUE(std::isinf(fp16_to_fp32(0x7c00)));
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7e00)));
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7c01)));  // signalling NaN stays NaN
}

TEST(Fp16, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    const bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    if (is_nan) {
      ASSERT_TRUE(std::isnan(f)) << h;
      ASSERT_EQ(fp32_to_fp16(f) & 0x7e00, 0x7e00) << h;  // quiet NaN
      continue;
    }
    ASSERT_EQ(fp32_to_fp16(f), h) << std::hex << h;
  }
}

// Every float between two adjacent halves rounds to the nearer one, ties to
// the even one; checked on the midpoints and their neighbours.
TEST(Fp16, MidpointsRoundToEven) {
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    const double lo = fp16_to_fp32(static_cast<uint16_t>(h));
    const double hi = fp16_to_fp32(static_cast<uint16_t>(h + 1));
    const auto mid = static_cast<float>((lo + hi) / 2);  // exact in binary32
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h);
    ASSERT_EQ(fp32_to_fp16(mid), even) << std::hex << h;
    ASSERT_EQ(fp32_to_fp16(std::nextafter(mid, 0.0f)), h) << std::hex << h;
    ASSERT_EQ(fp32_to_fp16(std::nextafter(mid, 1e9f)), h + 1) << std::hex << h;
    ASSERT_EQ(fp32_to_fp16(-mid), even | 0x8000) << std::hex << h;
  }
}

#if (defined(__x86_64__) && defined(__FLT16_MAX__)) || defined(__aarch64__)
// The compiler's own half type (libgcc on x86, the FCVT instruction on ARM;
// both correctly rounded) as an oracle.
#if defined(__aarch64__)
using CompilerHalf = __fp16;
#else
using CompilerHalf = _Float16;
#endif
TEST(Fp16, MatchesCompilerConversionOnRandomFloats) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 2000000; ++i) {
    const float f = from_bits(any(rng));
    if (std::isnan(f)) continue;
    const auto h = static_cast<CompilerHalf>(f);
    uint16_t hb;
    std::memcpy(&hb, &h, 2);
    ASSERT_EQ(fp32_to_fp16(f), hb) << f;
  }
}
#endif

TEST(Bf16, KnownValuesAndRounding) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3f818000u)), 0x3f82);  // tie -> even
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3f808001u)), 0x3f81);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to inf
  EXPECT_EQ(fp32_to_bf16(from_bits(0x00000001u)), 0x0000);  // subnormal rounds to 0
  EXPECT_EQ(fp32_to_bf16(from_bits(0x00008000u)), 0x0000);  // tie -> even
  EXPECT_EQ(fp32_to_bf16(from_bits(0x00018000u)), 0x0002);
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  const uint16_t nan = fp32_to_bf16(from_bits(0x7f800001u));  // NaN with low payload only
  EXPECT_TRUE(std::isnan(bf16_to_fp32(nan)));
  EXPECT_EQ(bf16_to_fp32(0x3f80), 1.0f);
  EXPECT_EQ(bits(bf16_to_fp32(0x0001)), 0x00010000u);
}

TEST(Bf16, RandomFloatsRoundToNearestEven) {
  std::mt19937 rng(2);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t u = any(rng);
    const float f = from_bits(u);
    if (std::isnan(f)) continue;
    const uint16_t b = fp32_to_bf16(f);
    // The two candidates are the truncation and the next value up in magnitude.
    const auto down = static_cast<uint16_t>(u >> 16);
    const auto up = static_cast<uint16_t>(down + 1);
    const uint32_t rest = u & 0xffffu;
    const uint16_t want = rest < 0x8000 ? down : rest > 0x8000 ? up : ((down & 1) ? up : down);
    ASSERT_EQ(b, want) << std::hex << u;
  }
}

}  // namespace
}  // namespace edgelm::kernels
