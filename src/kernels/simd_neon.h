// Internal: small NEON helpers shared by the *_neon.cpp files (built with
// -march=armv8.2-a+dotprod+fp16). Static inline (see fp16.h).
#pragma once

#include <arm_neon.h>

#include <cstdint>
#include <cstring>

namespace edgelm::kernels::neon {

static inline float half_to_float(uint16_t h) {
  __fp16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}

static inline int8x16_t load_s8(const void* p) {
  return vld1q_s8(static_cast<const int8_t*>(p));
}
static inline uint8x16_t load_u8(const void* p) {
  return vld1q_u8(static_cast<const uint8_t*>(p));
}
static inline int8x16_t as_s8(uint8x16_t v) {
  return vreinterpretq_s8_u8(v);
}

// 0xff in byte l (l < 16) where bit l of the 16-bit `bits` is set.
static inline uint8x16_t bits_to_bytes(uint32_t bits) {
  const uint8x16_t spread = vcombine_u8(vdup_n_u8(static_cast<uint8_t>(bits)),
                                        vdup_n_u8(static_cast<uint8_t>(bits >> 8)));
  const uint8x16_t sel = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ull));
  return vtstq_u8(spread, sel);
}

}  // namespace edgelm::kernels::neon
