// AVX-512 attention tile kernels (see attn_avx2.cpp): 16 lanes, and masked
// loads for a row's last partial vector instead of a scalar tail. The loop
// nests over rows and exp are attn_tiles.h's.

#include <immintrin.h>

#include "kernels/attn_tiles.h"
#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/simd_avx512.h"

namespace edgelm::kernels {
namespace {

using namespace avx512;

inline __mmask16 tail_mask(int64_t left) {
  return static_cast<__mmask16>(left >= 16 ? 0xffffu : (1u << left) - 1u);
}

struct Tiles {
  static void kv_f16(const void* src, float* dst, int64_t n) {
    const auto* h = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = tail_mask(n - i);
      _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, h + i)));
    }
  }

  static void kv_q8_0(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const BlockQ8_0*>(src);
    for (int64_t k = 0; k < n / kQK; ++k, dst += kQK) {
      const __m512 d = _mm512_set1_ps(half_to_float(b[k].d));
      for (int j = 0; j < kQK; j += 16) {
        const __m128i q8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[k].qs + j));
        _mm512_storeu_ps(dst + j, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q8)), d));
      }
    }
  }

  template <int NR, int NK>
  static void score_tile(const float* q, const float* k, int64_t d, float* s, int64_t lds) {
    __m512 acc[NR][NK];
    EDGELM_UNROLL for (int i = 0; i < NR; ++i)
      EDGELM_UNROLL for (int j = 0; j < NK; ++j) acc[i][j] = _mm512_setzero_ps();
    for (int64_t c = 0; c < d; c += 16) {
      const __mmask16 m = tail_mask(d - c);
      __m512 kv[NK];
      EDGELM_UNROLL for (int j = 0; j < NK; ++j) kv[j] = _mm512_maskz_loadu_ps(m, k + j * d + c);
      EDGELM_UNROLL for (int i = 0; i < NR; ++i) {
        const __m512 qv = _mm512_maskz_loadu_ps(m, q + i * d + c);
        EDGELM_UNROLL for (int j = 0; j < NK; ++j) acc[i][j] = _mm512_fmadd_ps(qv, kv[j], acc[i][j]);
      }
    }
    EDGELM_UNROLL for (int i = 0; i < NR; ++i)
      EDGELM_UNROLL for (int j = 0; j < NK; ++j) s[i * lds + j] = _mm512_reduce_add_ps(acc[i][j]);
  }

  // NR accumulator rows, columns [c, c + 16 * NV) (masked past d) in registers.
  template <int NR, int NV>
  static void accumulate_cols(const float* p, int64_t ldp, const float* v, int nk, int64_t d,
                              float* o, int64_t c) {
    __mmask16 m[NV];
    EDGELM_UNROLL for (int u = 0; u < NV; ++u) m[u] = tail_mask(d - c - 16 * u);
    __m512 a[NR][NV];
    EDGELM_UNROLL for (int i = 0; i < NR; ++i)
      EDGELM_UNROLL for (int u = 0; u < NV; ++u) a[i][u] = _mm512_maskz_loadu_ps(m[u], o + i * d + c + 16 * u);
    for (int j = 0; j < nk; ++j) {
      __m512 vv[NV];
      EDGELM_UNROLL for (int u = 0; u < NV; ++u) vv[u] = _mm512_maskz_loadu_ps(m[u], v + j * d + c + 16 * u);
      EDGELM_UNROLL for (int i = 0; i < NR; ++i) {
        const __m512 w = _mm512_set1_ps(p[i * ldp + j]);
        EDGELM_UNROLL for (int u = 0; u < NV; ++u) a[i][u] = _mm512_fmadd_ps(w, vv[u], a[i][u]);
      }
    }
    EDGELM_UNROLL for (int i = 0; i < NR; ++i)
      EDGELM_UNROLL for (int u = 0; u < NV; ++u) _mm512_mask_storeu_ps(o + i * d + c + 16 * u, m[u], a[i][u]);
  }

  template <int NR>
  static void accumulate_rows(const float* p, int64_t ldp, const float* v, int nk, int64_t d,
                              float* o) {
    int64_t c = 0;
    for (; c + 32 <= d; c += 32) accumulate_cols<NR, 2>(p, ldp, v, nk, d, o, c);
    for (; c < d; c += 16) accumulate_cols<NR, 1>(p, ldp, v, nk, d, o, c);
  }

  static float exp_sum(float* s, int n, float m) {
    const __m512 mv = _mm512_set1_ps(m);
    __m512 acc = _mm512_setzero_ps();
    for (int j = 0; j < n; j += 16) {
      const __mmask16 k = tail_mask(n - j);
      const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), mv);
      const __m512 e = _mm512_maskz_mov_ps(k, exp_neg<F32x16>(x));
      _mm512_mask_storeu_ps(s + j, k, e);
      acc = _mm512_add_ps(acc, e);
    }
    return _mm512_reduce_add_ps(acc);
  }
};

}  // namespace

void register_attn_avx512(Backend& be) {
  register_attn<Tiles>(be);
}

}  // namespace edgelm::kernels
