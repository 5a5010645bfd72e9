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

// 4 f32 lanes: the operations of the kernels that are written once over a
// vector type (float_rows.h, attn_tiles.h), as the NEON instructions they
// were written with here before. Internal linkage, as everything above.
namespace {
struct F32x4 {
  using V = float32x4_t;
  static constexpr int kLanes = 4;
  static constexpr int kRegisters = 32;
  static V zero() { return vdupq_n_f32(0.0f); }
  static V splat(float f) { return vdupq_n_f32(f); }
  static V load(const float* p) { return vld1q_f32(p); }
  static void store(float* p, V v) { vst1q_f32(p, v); }
  static V load_f16(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
  static V load_bf16(const uint16_t* p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
  }
  static float half(uint16_t h) { return half_to_float(h); }
  static V add(V a, V b) { return vaddq_f32(a, b); }
  static V sub(V a, V b) { return vsubq_f32(a, b); }
  static V mul(V a, V b) { return vmulq_f32(a, b); }
  static V fma(V a, V b, V c) { return vfmaq_f32(c, a, b); }   // a * b + c
  static V fnma(V a, V b, V c) { return vfmsq_f32(c, a, b); }  // c - a * b
  static V div(V a, V b) { return vdivq_f32(a, b); }
  static V neg_abs(V v) { return vnegq_f32(vabsq_f32(v)); }  // -|v|
  static V if_neg(V x, V a, V b) {                             // x < 0 (sign set) ? a : b
    const uint32x4_t sign = vcltq_s32(vreinterpretq_s32_f32(x), vdupq_n_s32(0));
    return vbslq_f32(sign, a, b);
  }
  // Pairs of lanes (2i, 2i+1), for RoPE: each pair's first lane in both,
  // its second in both, the two swapped; a - b in even lanes, a + b in odd.
  static V dup_even(V v) { return vtrn1q_f32(v, v); }
  static V dup_odd(V v) { return vtrn2q_f32(v, v); }
  static V swap_pairs(V v) { return vrev64q_f32(v); }
  static V sub_add(V a, V b) {
    static const float kSign[4] = {-1.0f, 1.0f, -1.0f, 1.0f};
    return vfmaq_f32(a, b, vld1q_f32(kSign));
  }
  static V round(V v) { return vrndnq_f32(v); }
  static float sum(V v) { return vaddvq_f32(v); }
  static V max(V a, V b) { return vmaxq_f32(a, b); }
  static float max_lane(V v) { return vmaxvq_f32(v); }
  // p * 2^n for integral n in [-126, 127], built in the exponent bits.
  static V scale_pow2(V p, V n) {
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(p, vreinterpretq_f32_s32(e));
  }
  // y where x >= lim, else 0.
  static V keep_ge(V y, V x, float lim) {
    return vreinterpretq_f32_u32(
        vandq_u32(vreinterpretq_u32_f32(y), vcgeq_f32(x, vdupq_n_f32(lim))));
  }
};
}  // namespace

}  // namespace edgelm::kernels::neon
