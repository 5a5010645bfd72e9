// AVX-512 attention tile kernels (see attn_avx2.cpp): 16 lanes, and masked
// loads for a row's last partial vector instead of a scalar tail. Their own
// tile shapes (wider than attn_tiles.h's: 32 registers) and a 16-way sum of
// the score accumulators; exp is attn_tiles.h's.

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

  // A row's next 16 keys or values, or (masked) the lanes m of them and 0
  // past the row. A masked load costs a shuffle-port uop more than a plain
  // one, which the FMAs need, so full vectors use plain loads.
  static __m512 load_kv(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 load_kv(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 load_kv(__mmask16 m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
  static __m512 load_kv(__mmask16 m, const uint16_t* p) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
  template <bool kFull, class E>
  static __m512 load(__mmask16 m, const E* p) {
    if constexpr (kFull) {
      return load_kv(p);
    } else {
      return load_kv(m, p);
    }
  }

  // NR accumulator rows, columns [c, c + 16 * NV) in registers (kFull: all
  // within d; else masked past d); row j of `ahead` requested beside value
  // row j.
  template <int NR, int NV, class E, bool kFull>
  static void accumulate_cols(const float* p, int64_t ldp, const E* v, int nk, int64_t d, float* o,
                              int64_t c, const E* ahead, int n_ahead) {
    __mmask16 m[NV];
    EDGELM_UNROLL for (int u = 0; u < NV; ++u) m[u] = tail_mask(d - c - 16 * u);
    __m512 a[NR][NV];
    EDGELM_UNROLL for (int i = 0; i < NR; ++i)
      EDGELM_UNROLL for (int u = 0; u < NV; ++u) a[i][u] = load<kFull>(m[u], o + i * d + c + 16 * u);
    for (int j = 0; j < nk; ++j) {
      request_row(ahead, n_ahead, j, d);
      __m512 vv[NV];
      EDGELM_UNROLL for (int u = 0; u < NV; ++u) vv[u] = load<kFull>(m[u], v + j * d + c + 16 * u);
      EDGELM_UNROLL for (int i = 0; i < NR; ++i) {
        const __m512 w = _mm512_set1_ps(p[i * ldp + j]);
        EDGELM_UNROLL for (int u = 0; u < NV; ++u) a[i][u] = _mm512_fmadd_ps(w, vv[u], a[i][u]);
      }
    }
    EDGELM_UNROLL for (int i = 0; i < NR; ++i)
      EDGELM_UNROLL for (int u = 0; u < NV; ++u) {
        if constexpr (kFull) {
          _mm512_storeu_ps(o + i * d + c + 16 * u, a[i][u]);
        } else {
          _mm512_mask_storeu_ps(o + i * d + c + 16 * u, m[u], a[i][u]);
        }
      }
  }

  // Lane k of the result = the sum of a[k]'s 16 lanes, for every k in the
  // same order (pairs of lanes 2 apart within each 128-bit chunk, then the
  // neighbours, then chunks 0+1 and 2+3, then the two halves): a score
  // rounds the same in whichever lane of whichever tile it is computed.
  // 30 shuffles and 15 adds for 16 sums, against 4 and 4 for each sum by
  // _mm512_reduce_add_ps.
  static __m512 reduce16(const __m512 (&a)[16]) {
    __m512 t[8];
    EDGELM_UNROLL for (int m = 0; m < 8; ++m)
      t[m] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * m], a[2 * m + 1]), _mm512_unpackhi_ps(a[2 * m], a[2 * m + 1]));
    __m512 u[4];
    EDGELM_UNROLL for (int m = 0; m < 4; ++m) {
      const __m512d x = _mm512_castps_pd(t[2 * m]), y = _mm512_castps_pd(t[2 * m + 1]);
      u[m] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    const __m512 v01 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 v23 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_f32x4(u[2], u[3], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(v01, v23, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(v01, v23, _MM_SHUFFLE(3, 1, 3, 1)));
  }

  // Columns [c, c + 16) of every (row, key) accumulator.
  template <int NR, int NK, bool kFull, class E>
  static inline __attribute__((always_inline)) void score_step(const float* q, const E* const (&kr)[NK], int64_t d,
                                                               int64_t c, __mmask16 m, __m512 (&acc)[16]) {
    __m512 kv[NK];
    EDGELM_UNROLL for (int j = 0; j < NK; ++j) kv[j] = load<kFull>(m, kr[j] + c);
    EDGELM_UNROLL for (int i = 0; i < NR; ++i) {
      const __m512 qv = load<kFull>(m, q + i * d + c);
      EDGELM_UNROLL for (int j = 0; j < NK; ++j) acc[i * NK + j] = _mm512_fmadd_ps(qv, kv[j], acc[i * NK + j]);
    }
  }

  // Scores of NR query rows against NK key rows (NR * NK <= 16), of which
  // the first nkv (>= 1) exist: the others repeat the last key and are not
  // stored. One accumulator per (row, key) walks the columns in order, then
  // reduce16 sums them all at once.
  template <int NR, int NK, class E>
  static void score_block(const float* q, const E* k, int nkv, int64_t d, float* s, int64_t lds) {
    static_assert(NR * NK <= 16);
    __m512 acc[16];
    EDGELM_UNROLL for (int a = 0; a < 16; ++a) acc[a] = _mm512_setzero_ps();
    const E* kr[NK];
    EDGELM_UNROLL for (int j = 0; j < NK; ++j) kr[j] = k + (j < nkv ? j : nkv - 1) * d;
    int64_t c = 0;
    for (; c + 16 <= d; c += 16) score_step<NR, NK, true>(q, kr, d, c, 0xffff, acc);
    if (c < d) score_step<NR, NK, false>(q, kr, d, c, tail_mask(d - c), acc);
    const __m512 r = reduce16(acc);
    const int n = nkv < NK ? nkv : NK;
    // Row i's NK scores are lanes [i * NK, i * NK + n). Through memory: the
    // extract instructions need an immediate, which a loop index is not in
    // an unoptimized (sanitizer) build.
    alignas(64) float t[16];
    _mm512_store_ps(t, r);
    EDGELM_UNROLL for (int i = 0; i < NR; ++i)
      for (int j = 0; j < n; ++j) s[i * lds + j] = t[i * NK + j];
  }

  // Row j of `ahead` is requested before the block with key row j.
  template <int NR, int NK, class E>
  static void score_rows(const float* q, const E* k, int nk, int64_t d, float* s, int64_t lds,
                         const E* ahead, int n_ahead) {
    for (int j = 0; j < nk; j += NK) {
      EDGELM_UNROLL for (int u = 0; u < NK; ++u) request_row(ahead, n_ahead, j + u, d);
      score_block<NR, NK, E>(q, k + j * d, nk - j, d, s + j, lds);
    }
  }

  // Four query rows by four keys, then two by eight, then one by eight.
  // The first pass over the keys requests `ahead`.
  template <class E>
  static void scores(const float* q, int nq, const E* k, int nk, int64_t d, float* s, int64_t lds,
                     const E* ahead, int n_ahead) {
    int i = 0;
    for (; i + 4 <= nq; i += 4, ahead = nullptr)
      score_rows<4, 4, E>(q + i * d, k, nk, d, s + i * lds, lds, ahead, n_ahead);
    for (; i + 2 <= nq; i += 2, ahead = nullptr)
      score_rows<2, 8, E>(q + i * d, k, nk, d, s + i * lds, lds, ahead, n_ahead);
    if (i < nq) score_rows<1, 8, E>(q + i * d, k, nk, d, s + i * lds, lds, ahead, n_ahead);
  }

  // NR accumulator rows, 16 * NV columns at a time while they last, then
  // 16 (the last masked). NR * NV accumulators stay in registers over all
  // nk keys; each value vector is loaded once for the NR rows.
  // The first pass over the keys requests `ahead`.
  template <int NR, int NV, class E>
  static void accumulate_block(const float* p, int64_t ldp, const E* v, int nk, int64_t d, float* o,
                               const E* ahead, int n_ahead) {
    int64_t c = 0;
    for (; c + 16 * NV <= d; c += 16 * NV, ahead = nullptr)
      accumulate_cols<NR, NV, E, true>(p, ldp, v, nk, d, o, c, ahead, n_ahead);
    for (; c + 16 <= d; c += 16, ahead = nullptr)
      accumulate_cols<NR, 1, E, true>(p, ldp, v, nk, d, o, c, ahead, n_ahead);
    if (c < d) accumulate_cols<NR, 1, E, false>(p, ldp, v, nk, d, o, c, ahead, n_ahead);
  }

  // Six rows by 64 columns (24 accumulators: a GQA group of six, Qwen2's),
  // four by 64, two and one by 128. The first row group requests `ahead`.
  template <class E>
  static void accumulate(const float* p, int64_t ldp, int nq, const E* v, int nk, int64_t d,
                         float* o, const E* ahead, int n_ahead) {
    int i = 0;
    for (; i + 6 <= nq; i += 6, ahead = nullptr)
      accumulate_block<6, 4, E>(p + i * ldp, ldp, v, nk, d, o + i * d, ahead, n_ahead);
    for (; i + 4 <= nq; i += 4, ahead = nullptr)
      accumulate_block<4, 4, E>(p + i * ldp, ldp, v, nk, d, o + i * d, ahead, n_ahead);
    for (; i + 2 <= nq; i += 2, ahead = nullptr)
      accumulate_block<2, 8, E>(p + i * ldp, ldp, v, nk, d, o + i * d, ahead, n_ahead);
    if (i < nq) accumulate_block<1, 8, E>(p + i * ldp, ldp, v, nk, d, o + i * d, ahead, n_ahead);
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

  // Lanes past n keep the running max (a masked load over it).
  static float max_of(const float* s, int n) {
    __m512 a = _mm512_set1_ps(s[0]);
    int j = 0;
    for (; j + 16 <= n; j += 16) a = _mm512_max_ps(a, _mm512_loadu_ps(s + j));
    if (j < n) a = _mm512_max_ps(a, _mm512_mask_loadu_ps(a, tail_mask(n - j), s + j));
    return _mm512_reduce_max_ps(a);
  }
};

}  // namespace

void register_attn_avx512(Backend& be) {
  register_attn<Tiles>(be);
}

}  // namespace edgelm::kernels
