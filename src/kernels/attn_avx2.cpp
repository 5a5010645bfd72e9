// AVX2 attention tile kernels: KV rows to f32, the score tile Q x K^T and
// the P x V accumulation (see kernels.h). Per (query row, key row) one
// 8-lane accumulator walks the row in order, so every tile shape rounds a
// score the same way.

#include <immintrin.h>

#include <cstring>

#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/simd_avx2.h"

namespace edgelm::kernels {
namespace {

using namespace avx2;

inline void kv_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

inline void kv_f16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(load128(h + i)));
  for (; i < n; ++i) dst[i] = half_to_float(h[i]);
}

inline void kv_q8_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t k = 0; k < n / kQK; ++k, dst += kQK) {
    const __m256 d = _mm256_set1_ps(half_to_float(b[k].d));
    for (int j = 0; j < kQK; j += 8) {
      const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[k].qs + j));
      _mm256_storeu_ps(dst + j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), d));
    }
  }
}

// Scores of NR query rows against NK key rows.
template <int NR, int NK>
inline void score_tile(const float* q, const float* k, int64_t d, float* s, int64_t lds) {
  __m256 acc[NR][NK];
  for (int i = 0; i < NR; ++i)
    for (int j = 0; j < NK; ++j) acc[i][j] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= d; c += 8) {
    __m256 kv[NK];
    for (int j = 0; j < NK; ++j) kv[j] = _mm256_loadu_ps(k + j * d + c);
    for (int i = 0; i < NR; ++i) {
      const __m256 qv = _mm256_loadu_ps(q + i * d + c);
      for (int j = 0; j < NK; ++j) acc[i][j] = _mm256_fmadd_ps(qv, kv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < NR; ++i) {
    for (int j = 0; j < NK; ++j) {
      float t = hsum(acc[i][j]);
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

// NR accumulator rows, columns [c, c + 8 * NV) kept in registers over all nk keys.
template <int NR, int NV>
inline void accumulate_cols(const float* p, int64_t ldp, const float* v, int nk, int64_t d, float* o, int64_t c) {
  __m256 a[NR][NV];
  for (int i = 0; i < NR; ++i)
    for (int u = 0; u < NV; ++u) a[i][u] = _mm256_loadu_ps(o + i * d + c + 8 * u);
  for (int j = 0; j < nk; ++j) {
    __m256 vv[NV];
    for (int u = 0; u < NV; ++u) vv[u] = _mm256_loadu_ps(v + j * d + c + 8 * u);
    for (int i = 0; i < NR; ++i) {
      const __m256 w = _mm256_broadcast_ss(p + i * ldp + j);
      for (int u = 0; u < NV; ++u) a[i][u] = _mm256_fmadd_ps(w, vv[u], a[i][u]);
    }
  }
  for (int i = 0; i < NR; ++i)
    for (int u = 0; u < NV; ++u) _mm256_storeu_ps(o + i * d + c + 8 * u, a[i][u]);
}

template <int NR>
inline void accumulate_rows(const float* p, int64_t ldp, const float* v, int nk, int64_t d, float* o) {
  int64_t c = 0;
  for (; c + 16 <= d; c += 16) accumulate_cols<NR, 2>(p, ldp, v, nk, d, o, c);
  for (; c + 8 <= d; c += 8) accumulate_cols<NR, 1>(p, ldp, v, nk, d, o, c);
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

// exp(x) for x <= 0: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two so
// n ln2 is exact enough), e^r by its Taylor polynomial to r^6 (truncation
// about 1.2e-7 relative), times 2^n built in the exponent bits. Below
// -87.3 (2^-126) the result is 0.
inline __m256 exp_neg(__m256 x) {
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_and_ps(y, _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_GE_OQ));
}

float exp_sum(float* s, int n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256 acc = _mm256_setzero_ps();
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp_neg(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
    _mm256_storeu_ps(s + j, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (j < n) {
    alignas(32) float t[8];
    for (int u = 0; u < 8; ++u) t[u] = j + u < n ? s[j + u] - m : -100.0f;
    const __m256 e = exp_neg(_mm256_load_ps(t));
    _mm256_store_ps(t, e);
    for (int u = 0; j + u < n; ++u) s[j + u] = t[u];
    acc = _mm256_add_ps(acc, e);  // the padding lanes are 0
  }
  return hsum(acc);
}

}  // namespace

void register_attn_avx2(Backend& be) {
  be.kv_to_f32[kv_slot(DType::F32)] = kv_rows<kv_f32>;
  be.kv_to_f32[kv_slot(DType::F16)] = kv_rows<kv_f16>;
  be.kv_to_f32[kv_slot(DType::Q8_0)] = kv_rows<kv_q8_0>;
  be.attn_scores = scores;
  be.attn_accumulate = accumulate;
  be.attn_exp_sum = exp_sum;
}

}  // namespace edgelm::kernels
