// AVX-512 activation quantizers (Q8_0, Q8_1, Q8_K; bit-identical to the
// reference in reference.h) and KV cache helpers (F32, F16, Q8_0 rows); the
// loops over blocks are act_quant.h's.

#include <immintrin.h>

#include "kernels/act_quant.h"
#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/fp16.h"
#include "kernels/simd_avx512.h"

namespace edgelm::kernels {
namespace {

using namespace avx512;

// roundf() on 16 lanes: to nearest, ties away from zero. Truncate, then step
// away from zero when the dropped fraction (exact in float) is at least 1/2.
inline __m512 round_half_away(__m512 v) {
  const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __mmask16 up =
      _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one = _mm512_or_ps(_mm512_and_ps(v, _mm512_set1_ps(-0.0f)), _mm512_set1_ps(1.0f));
  return _mm512_mask_add_ps(t, up, t, one);
}

inline __mmask16 tail_mask(int64_t rem) {
  return static_cast<__mmask16>((1u << rem) - 1);
}

inline __m512 int8x16_to_ps(const int8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// The vector work of act_quant.h, and the KV rows: 16 lanes, masked loads
// for a row's last partial vector.
struct Act {
  // One 32-element block the way quantize_q8_0 does it (see act_quant.h).
  static int q8_block(const float* x, uint16_t* d_out, int8_t* qs, float* d_exact) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    *d_out = fp::float_to_half(d);
    *d_exact = d;
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_cvtps_epi32(round_half_away(_mm512_mul_ps(v0, vid)));
    const __m512i q1 = _mm512_cvtps_epi32(round_half_away(_mm512_mul_ps(v1, vid)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16), _mm512_cvtepi32_epi8(q1));
    return _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
  }

  static float abs_max_k(const float* x) {
    __m512 vmax = _mm512_setzero_ps();
    for (int k = 0; k < 16; ++k)
      vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(x + 16 * k)));
    return _mm512_reduce_max_ps(vmax);
  }

  static float first_of_magnitude(const float* x, float amax) {
    for (int k = 0; k < 16; ++k) {
      const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * k)),
                                               _mm512_set1_ps(amax), _CMP_EQ_OQ);
      if (hit) return x[16 * k + __builtin_ctz(hit)];
    }
    return 0.0f;
  }

  static void q8_k_quants(const float* x, float iscale, int8_t* qs, int16_t* bsums) {
    const __m512 vs = _mm512_set1_ps(iscale);
    // Unrolled as GCC did when this loop sat in quantize_q8_k itself.
#pragma GCC unroll 16
    for (int k = 0; k < 16; ++k) {
      // cvtps rounds to nearest even, like the reference's nearest_int.
      __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(vs, _mm512_loadu_ps(x + 16 * k)));
      q = _mm512_min_epi32(q, _mm512_set1_epi32(127));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16 * k), _mm512_cvtepi32_epi8(q));
      bsums[k] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
    }
  }

  static float dot_kv_f32(const float* q, const void* kv, int64_t n) {
    const auto* k = static_cast<const float*>(kv);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_loadu_ps(k + i), acc0);
      acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), _mm512_loadu_ps(k + i + 16), acc1);
    }
    for (; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : tail_mask(n - i);
      acc0 =
          _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), _mm512_maskz_loadu_ps(m, k + i), acc0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
  }

  static float dot_kv_f16(const float* q, const void* kv, int64_t n) {
    const auto* k = static_cast<const uint16_t*>(kv);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const __m512 k0 =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + i)));
      const __m512 k1 =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + i + 16)));
      acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), k0, acc0);
      acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), k1, acc1);
    }
    for (; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : tail_mask(n - i);
      acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i),
                             _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, k + i)), acc0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
  }

  // Per block: (sum of the 32 products) * d, as the reference.
  static float dot_kv_q8_0(const float* q, const void* kv, int64_t n) {
    const auto* k = static_cast<const BlockQ8_0*>(kv);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < n / kQK; ++b, q += kQK) {
      const __m512 p = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16), int8x16_to_ps(k[b].qs + 16),
                                       _mm512_mul_ps(_mm512_loadu_ps(q), int8x16_to_ps(k[b].qs)));
      acc = _mm512_fmadd_ps(p, _mm512_set1_ps(half_to_float(k[b].d)), acc);
    }
    return _mm512_reduce_add_ps(acc);
  }

  static void axpy_kv_f32(float a, const void* v, float* y, int64_t n) {
    const auto* vf = static_cast<const float*>(v);
    const __m512 va = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : tail_mask(n - i);
      _mm512_mask_storeu_ps(
          y + i, m,
          _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, vf + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
  }

  static void axpy_kv_f16(float a, const void* v, float* y, int64_t n) {
    const auto* vh = static_cast<const uint16_t*>(v);
    const __m512 va = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : tail_mask(n - i);
      const __m512 vv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, vh + i));
      _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, vv, _mm512_maskz_loadu_ps(m, y + i)));
    }
  }

  // y += (a * d) * q per block, as the reference.
  static void axpy_kv_q8_0(float a, const void* v, float* y, int64_t n) {
    const auto* vb = static_cast<const BlockQ8_0*>(v);
    for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
      const __m512 ad = _mm512_set1_ps(a * half_to_float(vb[b].d));
      _mm512_storeu_ps(y, _mm512_fmadd_ps(ad, int8x16_to_ps(vb[b].qs), _mm512_loadu_ps(y)));
      _mm512_storeu_ps(y + 16,
                       _mm512_fmadd_ps(ad, int8x16_to_ps(vb[b].qs + 16), _mm512_loadu_ps(y + 16)));
    }
  }
};

}  // namespace

void register_act_avx512(Backend& be) {
  register_act<Act>(be);
}

}  // namespace edgelm::kernels
