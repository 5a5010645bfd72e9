// AVX2 activation quantizers (Q8_0, Q8_1, Q8_K; bit-identical to the
// reference in reference.h) and KV cache helpers (F32, F16, Q8_0 rows); the
// loops over blocks are act_quant.h's.

#include <immintrin.h>

#include "kernels/act_quant.h"
#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/float_rows.h"
#include "kernels/fp16.h"
#include "kernels/simd_avx2.h"

namespace edgelm::kernels {
namespace {

using namespace avx2;

// roundf() on 8 lanes: truncate, then step away from zero when the dropped
// fraction (exact in float) is at least 1/2.
inline __m256 round_half_away(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 up = _mm256_cmp_ps(abs_ps(_mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 one = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(1.0f));
  return _mm256_add_ps(t, _mm256_and_ps(up, one));
}

// Four vectors of 8 int32 (each within int8) -> 32 bytes in order.
inline __m256i pack_i32x32_to_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b);  // per 128-bit lane: a0 b0 | a1 b1
  const __m256i cd = _mm256_packs_epi32(c, d);
  const __m256i abcd = _mm256_packs_epi16(ab, cd);  // a0 b0 c0 d0 | a1 b1 c1 d1 (4 bytes each)
  return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline __m256 int8x8_to_ps(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// The vector work of act_quant.h; the F32 and F16 KV rows are float_rows.h's.
struct Act : KvRows<F32x8> {
  // One 32-element block the way quantize_q8_0 does it (see act_quant.h).
  static int q8_block(const float* x, uint16_t* d_out, int8_t* qs, float* d_exact) {
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(x + 8 * k);
      amax = _mm256_max_ps(amax, abs_ps(v[k]));
    }
    const float d = hmax(amax) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    *d_out = fp::float_to_half(d);
    *d_exact = d;
    __m256i q[4];
    for (int k = 0; k < 4; ++k)
      q[k] = _mm256_cvtps_epi32(round_half_away(_mm256_mul_ps(v[k], _mm256_set1_ps(id))));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), pack_i32x32_to_i8(q[0], q[1], q[2], q[3]));
    return hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
  }

  static float abs_max_k(const float* x) {
    __m256 vmax = _mm256_setzero_ps();
    for (int k = 0; k < 32; ++k) vmax = _mm256_max_ps(vmax, abs_ps(_mm256_loadu_ps(x + 8 * k)));
    return hmax(vmax);
  }

  static float first_of_magnitude(const float* x, float amax) {
    for (int k = 0; k < 32; ++k) {
      const int hit = _mm256_movemask_ps(
          _mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + 8 * k)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
      if (hit) return x[8 * k + __builtin_ctz(static_cast<unsigned>(hit))];
    }
    return 0.0f;
  }

  static void q8_k_quants(const float* x, float iscale, int8_t* qs, int16_t* bsums) {
    const __m256 vs = _mm256_set1_ps(iscale);
    for (int g = 0; g < 8; ++g) {  // 32 elements = two bsums groups per pass
      __m256i q[4];
      for (int k = 0; k < 4; ++k) {
        // cvtps rounds to nearest even, like the reference's nearest_int.
        q[k] = _mm256_min_epi32(
            _mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + 32 * g + 8 * k))),
            _mm256_set1_epi32(127));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + 32 * g),
                          pack_i32x32_to_i8(q[0], q[1], q[2], q[3]));
      bsums[2 * g] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(q[0], q[1])));
      bsums[2 * g + 1] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(q[2], q[3])));
    }
  }

  // Per block: (sum of the 32 products) * d, as the reference.
  static float dot_kv_q8_0(const float* q, const void* kv, int64_t n) {
    const auto* k = static_cast<const BlockQ8_0*>(kv);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / kQK; ++b, q += kQK) {
      __m256 p = _mm256_mul_ps(_mm256_loadu_ps(q), int8x8_to_ps(k[b].qs));
      p = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8), int8x8_to_ps(k[b].qs + 8), p);
      p = _mm256_fmadd_ps(_mm256_loadu_ps(q + 16), int8x8_to_ps(k[b].qs + 16), p);
      p = _mm256_fmadd_ps(_mm256_loadu_ps(q + 24), int8x8_to_ps(k[b].qs + 24), p);
      acc = _mm256_fmadd_ps(p, _mm256_set1_ps(half_to_float(k[b].d)), acc);
    }
    return hsum(acc);
  }

  // y += (a * d) * q per block, as the reference.
  static void axpy_kv_q8_0(float a, const void* v, float* y, int64_t n) {
    const auto* vb = static_cast<const BlockQ8_0*>(v);
    for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
      const __m256 ad = _mm256_set1_ps(a * half_to_float(vb[b].d));
      for (int k = 0; k < 4; ++k) {
        _mm256_storeu_ps(y + 8 * k, _mm256_fmadd_ps(ad, int8x8_to_ps(vb[b].qs + 8 * k),
                                                    _mm256_loadu_ps(y + 8 * k)));
      }
    }
  }
};

}  // namespace

void register_act_avx2(Backend& be) {
  register_act<Act>(be);
}

}  // namespace edgelm::kernels
