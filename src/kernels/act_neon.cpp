// NEON activation quantizers (Q8_0, Q8_1, Q8_K; bit-identical to the
// reference in reference.h) and KV cache helpers (F32, F16, Q8_0 rows).

#include <arm_neon.h>

#include <cmath>
#include <cstring>

#include "kernels/backend.h"
#include "kernels/blocks.h"
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

// One 32-element block the way quantize_q8_0 does it; returns sum(q) and the
// unrounded scale. fcvtas rounds to nearest with ties away from zero, which
// is exactly roundf().
inline int quantize_block_q8(const float* x, uint16_t* d_out, int8_t* qs, float* d_exact) {
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

void quantize_q8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  float d;
  for (int64_t b = 0; b < n / kQK; ++b) quantize_block_q8(x + b * kQK, &y[b].d, y[b].qs, &d);
}

void quantize_q8_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    float d;
    const int sum = quantize_block_q8(x + b * kQK, &y[b].d, y[b].qs, &d);
    y[b].s = fp::float_to_half(static_cast<float>(sum) * d);
  }
}

void quantize_q8_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    float32x4_t vmax = vdupq_n_f32(0.0f);
    for (int k = 0; k < 64; ++k) vmax = vmaxq_f32(vmax, vabsq_f32(vld1q_f32(x + 4 * k)));
    const float amax = vmaxvq_f32(vmax);
    if (amax == 0.0f) {
      std::memset(&y[b], 0, sizeof y[b]);
      continue;
    }
    // The reference keeps the first element of largest magnitude, sign included.
    float m = 0.0f;
    for (int e = 0; e < kQK_K; ++e) {
      if (std::fabs(x[e]) == amax) {
        m = x[e];
        break;
      }
    }
    const float iscale = -127.0f / m;
    for (int g = 0; g < 16; ++g) {
      int32x4_t q[4];
      for (int k = 0; k < 4; ++k) {
        // fcvtns: nearest, ties to even, like the reference's nearest_int.
        q[k] = vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 16 * g + 4 * k), iscale)),
                         vdupq_n_s32(127));
      }
      vst1q_s8(y[b].qs + 16 * g, narrow16(q[0], q[1], q[2], q[3]));
      y[b].bsums[g] =
          static_cast<int16_t>(vaddvq_s32(vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3]))));
    }
    y[b].d = 1.0f / iscale;
  }
}

// ---- KV rows -----------------------------------------------------------------------

inline float32x4_t load_f16x4(const uint16_t* p) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}

float dot_kv_f32(const float* q, const void* kv, int64_t n) {
  const auto* k = static_cast<const float*>(kv);
  float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    acc0 = vfmaq_f32(acc0, vld1q_f32(q + i), vld1q_f32(k + i));
    acc1 = vfmaq_f32(acc1, vld1q_f32(q + i + 4), vld1q_f32(k + i + 4));
  }
  for (; i + 4 <= n; i += 4) acc0 = vfmaq_f32(acc0, vld1q_f32(q + i), vld1q_f32(k + i));
  float s = vaddvq_f32(vaddq_f32(acc0, acc1));
  for (; i < n; ++i) s += q[i] * k[i];
  return s;
}

float dot_kv_f16(const float* q, const void* kv, int64_t n) {
  const auto* k = static_cast<const uint16_t*>(kv);
  float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = vdupq_n_f32(0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    acc0 = vfmaq_f32(acc0, vld1q_f32(q + i), load_f16x4(k + i));
    acc1 = vfmaq_f32(acc1, vld1q_f32(q + i + 4), load_f16x4(k + i + 4));
  }
  for (; i + 4 <= n; i += 4) acc0 = vfmaq_f32(acc0, vld1q_f32(q + i), load_f16x4(k + i));
  float s = vaddvq_f32(vaddq_f32(acc0, acc1));
  for (; i < n; ++i) s += q[i] * half_to_float(k[i]);
  return s;
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

// Per block: (sum of the 32 products) * d, as the reference.
float dot_kv_q8_0(const float* q, const void* kv, int64_t n) {
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

void axpy_kv_f32(float a, const void* v, float* y, int64_t n) {
  const auto* vf = static_cast<const float*>(v);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(vf + i), a));
  for (; i < n; ++i) y[i] += a * vf[i];
}

void axpy_kv_f16(float a, const void* v, float* y, int64_t n) {
  const auto* vh = static_cast<const uint16_t*>(v);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), load_f16x4(vh + i), a));
  for (; i < n; ++i) y[i] += a * half_to_float(vh[i]);
}

// y += (a * d) * q per block, as the reference.
void axpy_kv_q8_0(float a, const void* v, float* y, int64_t n) {
  const auto* vb = static_cast<const BlockQ8_0*>(v);
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float ad = a * half_to_float(vb[b].d);
    float32x4_t kf[8];
    int8x16_to_f32(vb[b].qs, kf);
    int8x16_to_f32(vb[b].qs + 16, kf + 4);
    for (int i = 0; i < 8; ++i) vst1q_f32(y + 4 * i, vfmaq_n_f32(vld1q_f32(y + 4 * i), kf[i], ad));
  }
}

}  // namespace

void register_act_neon(Backend& be) {
  be.quantize[act_slot(DType::Q8_0)] = quantize_q8_0;
  be.quantize[act_slot(DType::Q8_1)] = quantize_q8_1;
  be.quantize[act_slot(DType::Q8_K)] = quantize_q8_k;
  be.dot_kv[kv_slot(DType::F32)] = dot_kv_f32;
  be.dot_kv[kv_slot(DType::F16)] = dot_kv_f16;
  be.dot_kv[kv_slot(DType::Q8_0)] = dot_kv_q8_0;
  be.axpy_kv[kv_slot(DType::F32)] = axpy_kv_f32;
  be.axpy_kv[kv_slot(DType::F16)] = axpy_kv_f16;
  be.axpy_kv[kv_slot(DType::Q8_0)] = axpy_kv_q8_0;
}

}  // namespace edgelm::kernels
