// Scalar IEEE binary16 / bfloat16 <-> binary32 conversions, inline for the
// kernels' hot loops (kernels.h exports the same functions out of line).
//
// These are `static inline` on purpose: the header is included by translation
// units compiled with different -m flags (AVX2, AVX-512, NEON). An ordinary
// `inline` function would be emitted once per object and the linker would keep
// an arbitrary copy, so portable code could end up calling an AVX-512 build of
// it. Internal linkage gives each translation unit its own copy.
#pragma once

#include <cstdint>
#include <cstring>

namespace edgelm::kernels::fp {

static inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

static inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Exact: every binary16 value (subnormals, infinities, NaN payloads) is a
// binary32 value.
static inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in binary32.
    const float v = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + (127 - 15)) << 23) | (mant << 13));
}

// Round to nearest, ties to even; overflow gives infinity, NaN stays NaN
// (quiet, with the top payload bits kept).
static inline uint16_t float_to_half(float f) {
  const uint32_t u = f32_bits(f);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  // 65520 = 65504 + half an ulp: it and everything above round to infinity.
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a < 0x38800000u) {
    // Below the smallest normal half (2^-14): the result is m * 2^-24 with m
    // in [0, 1024]; scaling by 2^24 is exact and adding 2^23 rounds the value
    // to an integer with the current (nearest-even) rounding.
    const float scaled = bits_f32(a) * 0x1p24f;
    const uint32_t m = f32_bits(scaled + 0x1p23f) - f32_bits(0x1p23f);
    return static_cast<uint16_t>(sign | m);  // m == 1024 is the smallest normal
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits to
  // nearest even; a carry out of the mantissa correctly bumps the exponent.
  const uint32_t rebiased = a - ((127u - 15u) << 23);
  const uint32_t rounded = rebiased + 0xfffu + ((a >> 13) & 1u);
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

static inline float bf16_to_float(uint16_t h) {
  return bits_f32(static_cast<uint32_t>(h) << 16);
}

// Round to nearest even; NaN is kept NaN by forcing the quiet bit.
static inline uint16_t float_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace edgelm::kernels::fp
