// NEON activation quantizers (Q8_0, Q8_1, Q8_K; bit-identical to the
// reference in reference.h) and KV cache helpers (F32, F16, Q8_0 rows); the
// loops over blocks are act_quant.h's.

#include <arm_neon.h>

#include <cmath>

#include "kernels/act_quant.h"
#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/float_rows.h"
#include "kernels/fp16.h"
#include "kernels/simd_neon.h"

namespace edgelm::kernels {
namespace {

using namespace neon;

// 16 int32 (each within int8) -> 16 bytes.
inline int8x16_t narrow16(int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t d) {
  const int16x8_t ab = vcombine_s16(vqmovn_s32(a), vqmovn_s32(b));
  const int16x8_t cd = vcombine_s16(vqmovn_s32(c), vqmovn_s32(d));
  return vcombine_s8(vqmovn_s16(ab), vqmovn_s16(cd));
}

// 16 int8 -> four float32x4.
inline void int8x16_to_f32(const int8_t* p, float32x4_t out[4]) {
  const int8x16_t v = vld1q_s8(p);
  const int16x8_t lo = vmovl_s8(vget_low_s8(v)), hi = vmovl_s8(vget_high_s8(v));
  out[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
  out[1] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo)));
  out[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
  out[3] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi)));
}

// The vector work of act_quant.h; the F32 and F16 KV rows are float_rows.h's.
struct Act : KvRows<F32x4> {
  // One 32-element block the way quantize_q8_0 does it (see act_quant.h).
  // fcvtas rounds to nearest with ties away from zero, which is exactly
  // roundf().
  static int q8_block(const float* x, uint16_t* d_out, int8_t* qs, float* d_exact) {
    float32x4_t v[8];
    float32x4_t amax = vdupq_n_f32(0.0f);
    for (int k = 0; k < 8; ++k) {
      v[k] = vld1q_f32(x + 4 * k);
      amax = vmaxq_f32(amax, vabsq_f32(v[k]));
    }
    const float d = vmaxvq_f32(amax) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    *d_out = fp::float_to_half(d);
    *d_exact = d;
    int32x4_t q[8];
    int32x4_t sum = vdupq_n_s32(0);
    for (int k = 0; k < 8; ++k) {
      q[k] = vcvtaq_s32_f32(vmulq_n_f32(v[k], id));
      sum = vaddq_s32(sum, q[k]);
    }
    vst1q_s8(qs, narrow16(q[0], q[1], q[2], q[3]));
    vst1q_s8(qs + 16, narrow16(q[4], q[5], q[6], q[7]));
    return vaddvq_s32(sum);
  }

  static float abs_max_k(const float* x) {
    float32x4_t vmax = vdupq_n_f32(0.0f);
    for (int k = 0; k < 64; ++k) vmax = vmaxq_f32(vmax, vabsq_f32(vld1q_f32(x + 4 * k)));
    return vmaxvq_f32(vmax);
  }

  static float first_of_magnitude(const float* x, float amax) {
    for (int e = 0; e < kQK_K; ++e)
      if (std::fabs(x[e]) == amax) return x[e];
    return 0.0f;
  }

  static void q8_k_quants(const float* x, float iscale, int8_t* qs, int16_t* bsums) {
    for (int g = 0; g < 16; ++g) {
      int32x4_t q[4];
      for (int k = 0; k < 4; ++k) {
        // fcvtns: nearest, ties to even, like the reference's nearest_int.
        q[k] = vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 16 * g + 4 * k), iscale)),
                         vdupq_n_s32(127));
      }
      vst1q_s8(qs + 16 * g, narrow16(q[0], q[1], q[2], q[3]));
      bsums[g] =
          static_cast<int16_t>(vaddvq_s32(vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3]))));
    }
  }

  // Per block: (sum of the 32 products) * d, as the reference.
  static float dot_kv_q8_0(const float* q, const void* kv, int64_t n) {
    const auto* k = static_cast<const BlockQ8_0*>(kv);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / kQK; ++b, q += kQK) {
      float32x4_t kf[8];
      int8x16_to_f32(k[b].qs, kf);
      int8x16_to_f32(k[b].qs + 16, kf + 4);
      float32x4_t p = vmulq_f32(vld1q_f32(q), kf[0]);
      for (int i = 1; i < 8; ++i) p = vfmaq_f32(p, vld1q_f32(q + 4 * i), kf[i]);
      acc = vfmaq_n_f32(acc, p, half_to_float(k[b].d));
    }
    return vaddvq_f32(acc);
  }

  // y += (a * d) * q per block, as the reference.
  static void axpy_kv_q8_0(float a, const void* v, float* y, int64_t n) {
    const auto* vb = static_cast<const BlockQ8_0*>(v);
    for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
      const float ad = a * half_to_float(vb[b].d);
      float32x4_t kf[8];
      int8x16_to_f32(vb[b].qs, kf);
      int8x16_to_f32(vb[b].qs + 16, kf + 4);
      for (int i = 0; i < 8; ++i)
        vst1q_f32(y + 4 * i, vfmaq_n_f32(vld1q_f32(y + 4 * i), kf[i], ad));
    }
  }
};

}  // namespace

void register_act_neon(Backend& be) {
  register_act<Act>(be);
}

}  // namespace edgelm::kernels
