// NEON attention tile kernels (see attn_avx2.cpp): 4 lanes, a scalar tail
// for rows that are not a multiple of 4.

#include <arm_neon.h>

#include <cstring>

#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/simd_neon.h"

namespace edgelm::kernels {
namespace {

using namespace neon;

inline void kv_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

inline void kv_f16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(dst + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h + i))));
  for (; i < n; ++i) dst[i] = half_to_float(h[i]);
}

inline void kv_q8_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t k = 0; k < n / kQK; ++k, dst += kQK) {
    const float d = half_to_float(b[k].d);
    for (int j = 0; j < kQK; j += 16) {
      const int8x16_t v = vld1q_s8(b[k].qs + j);
      const int16x8_t lo = vmovl_s8(vget_low_s8(v)), hi = vmovl_s8(vget_high_s8(v));
      vst1q_f32(dst + j, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d));
      vst1q_f32(dst + j + 4, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))), d));
      vst1q_f32(dst + j + 8, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d));
      vst1q_f32(dst + j + 12, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))), d));
    }
  }
}

template <int NR, int NK>
inline void score_tile(const float* q, const float* k, int64_t d, float* s, int64_t lds) {
  float32x4_t acc[NR][NK];
  for (int i = 0; i < NR; ++i)
    for (int j = 0; j < NK; ++j) acc[i][j] = vdupq_n_f32(0.0f);
  int64_t c = 0;
  for (; c + 4 <= d; c += 4) {
    float32x4_t kv[NK];
    for (int j = 0; j < NK; ++j) kv[j] = vld1q_f32(k + j * d + c);
    for (int i = 0; i < NR; ++i) {
      const float32x4_t qv = vld1q_f32(q + i * d + c);
      for (int j = 0; j < NK; ++j) acc[i][j] = vfmaq_f32(acc[i][j], qv, kv[j]);
    }
  }
  for (int i = 0; i < NR; ++i) {
    for (int j = 0; j < NK; ++j) {
      float t = vaddvq_f32(acc[i][j]);
      for (int64_t e = c; e < d; ++e) t += q[i * d + e] * k[j * d + e];
      s[i * lds + j] = t;
    }
  }
}

template <int NR>
inline void score_rows(const float* q, const float* k, int nk, int64_t d, float* s, int64_t lds) {
  int j = 0;
  for (; j + 2 <= nk; j += 2) score_tile<NR, 2>(q, k + j * d, d, s + j, lds);
  if (j < nk) score_tile<NR, 1>(q, k + j * d, d, s + j, lds);
}

void scores(const float* q, int nq, const float* k, int nk, int64_t d, float* s, int64_t lds) {
  int i = 0;
  for (; i + 4 <= nq; i += 4) score_rows<4>(q + i * d, k, nk, d, s + i * lds, lds);
  for (; i + 2 <= nq; i += 2) score_rows<2>(q + i * d, k, nk, d, s + i * lds, lds);
  if (i < nq) score_rows<1>(q + i * d, k, nk, d, s + i * lds, lds);
}

template <int NR, int NV>
inline void accumulate_cols(const float* p, int64_t ldp, const float* v, int nk, int64_t d, float* o, int64_t c) {
  float32x4_t a[NR][NV];
  for (int i = 0; i < NR; ++i)
    for (int u = 0; u < NV; ++u) a[i][u] = vld1q_f32(o + i * d + c + 4 * u);
  for (int j = 0; j < nk; ++j) {
    float32x4_t vv[NV];
    for (int u = 0; u < NV; ++u) vv[u] = vld1q_f32(v + j * d + c + 4 * u);
    for (int i = 0; i < NR; ++i) {
      const float w = p[i * ldp + j];
      for (int u = 0; u < NV; ++u) a[i][u] = vfmaq_n_f32(a[i][u], vv[u], w);
    }
  }
  for (int i = 0; i < NR; ++i)
    for (int u = 0; u < NV; ++u) vst1q_f32(o + i * d + c + 4 * u, a[i][u]);
}

template <int NR>
inline void accumulate_rows(const float* p, int64_t ldp, const float* v, int nk, int64_t d, float* o) {
  int64_t c = 0;
  for (; c + 16 <= d; c += 16) accumulate_cols<NR, 4>(p, ldp, v, nk, d, o, c);
  for (; c + 4 <= d; c += 4) accumulate_cols<NR, 1>(p, ldp, v, nk, d, o, c);
  for (; c < d; ++c) {
    for (int i = 0; i < NR; ++i) {
      float t = o[i * d + c];
      for (int j = 0; j < nk; ++j) t += p[i * ldp + j] * v[j * d + c];
      o[i * d + c] = t;
    }
  }
}

void accumulate(const float* p, int64_t ldp, int nq, const float* v, int nk, int64_t d, float* o) {
  int i = 0;
  for (; i + 4 <= nq; i += 4) accumulate_rows<4>(p + i * ldp, ldp, v, nk, d, o + i * d);
  for (; i + 2 <= nq; i += 2) accumulate_rows<2>(p + i * ldp, ldp, v, nk, d, o + i * d);
  if (i < nq) accumulate_rows<1>(p + i * ldp, ldp, v, nk, d, o + i * d);
}

// exp(x) for x <= 0, as in attn_avx2.cpp.
inline float32x4_t exp_neg(float32x4_t x) {
  const float32x4_t n = vrndnq_f32(vmulq_n_f32(x, 1.44269504088896341f));
  float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693145751953125f));
  r = vfmsq_f32(r, n, vdupq_n_f32(1.428606765330187e-06f));
  float32x4_t p = vdupq_n_f32(1.0f / 720);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 120), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 24), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 6), p, r);
  p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
  const float32x4_t y = vmulq_f32(p, vreinterpretq_f32_s32(e));
  return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(y), vcgeq_f32(x, vdupq_n_f32(-87.3f))));
}

float exp_sum(float* s, int n, float m) {
  float32x4_t acc = vdupq_n_f32(0.0f);
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    const float32x4_t e = exp_neg(vsubq_f32(vld1q_f32(s + j), vdupq_n_f32(m)));
    vst1q_f32(s + j, e);
    acc = vaddq_f32(acc, e);
  }
  if (j < n) {
    float t[4];
    for (int u = 0; u < 4; ++u) t[u] = j + u < n ? s[j + u] - m : -100.0f;
    const float32x4_t e = exp_neg(vld1q_f32(t));
    vst1q_f32(t, e);
    for (int u = 0; j + u < n; ++u) s[j + u] = t[u];
    acc = vaddq_f32(acc, e);  // the padding lanes are 0
  }
  return vaddvq_f32(acc);
}

}  // namespace

void register_attn_neon(Backend& be) {
  be.kv_to_f32[kv_slot(DType::F32)] = kv_rows<kv_f32>;
  be.kv_to_f32[kv_slot(DType::F16)] = kv_rows<kv_f16>;
  be.kv_to_f32[kv_slot(DType::Q8_0)] = kv_rows<kv_q8_0>;
  be.attn_scores = scores;
  be.attn_accumulate = accumulate;
  be.attn_exp_sum = exp_sum;
}

}  // namespace edgelm::kernels
