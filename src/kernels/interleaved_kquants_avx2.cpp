// AVX2 gemm for the K formats in the interleaved layout (pack_kquants.cpp
// has the bytes), the counterpart of interleaved_kquants_avx512.cpp without
// VNNI: a group of 16 rows is taken as two halves of 8 (one 32-bit lane per
// row), and per half, super-block and sub-block the quants are decoded to
// unsigned bytes once and used for up to four tokens.
//
// Per token, vpmaddubsw multiplies the quants by activation bytes broadcast
// to every lane, and the 16-bit pair sums are added as 16-bit values while
// they cannot overflow (a pair is at most 2 x 127 x the largest quant):
// eight vectors for Q4_K (quants < 16: 8 x 3810), four for Q5_K (< 32:
// 4 x 7874), two for Q6_K (< 64: 2 x 16002); then one vpmaddwd with ones
// widens them. The token's d is folded into the sub-block's scale, so each
// sub-block ends in one conversion and one multiply-add (and for Q4_K/Q5_K
// one more for the minimums, with the activation's sub-block sum times d).
// Q6_K's offset of 32 is removed exactly by starting each sub-block's
// integer sum at -32 x its activation sum, as in the AVX-512 kernel.
//
// The loop nest around the tiles is interleaved_driver.h's.
#include <immintrin.h>

#include <cstring>

#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/interleaved_driver.h"

namespace edgelm::kernels {
namespace {

constexpr int kSubTokens = 4;  // tokens per pass over a half's decoded quants

inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// 8 f16 values at p as floats; 8 unsigned / signed bytes at p as floats.
inline __m256 halves8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 u8_floats8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 i8_floats8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// Per token and super-block, from the activation block: d, and for Q4_K/Q5_K
// d x the sums of its 8 sub-blocks of 32 (for the minimums); for Q6_K the
// integer start of its 16 sub-blocks' sums.
struct TokSide {
  float d;
  alignas(32) float dbsum[8];
  alignas(32) int32_t init[16];
};

// Q4_K and Q5_K: 8 sub-blocks of 32, unsigned quants, scales and minimums.
template <bool kFifthBit>
struct Q45K : Q45KLayout<kFifthBit> {
  using L = Q45KLayout<kFifthBit>;
  static constexpr int kWiden = kFifthBit ? 4 : 8;  // 16-bit sums per widening

  static void token(const BlockQ8_K& x, TokSide& ts) {
    ts.d = x.d;
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums));
    _mm256_store_ps(ts.dbsum,
                    _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(b, _mm256_set1_epi16(1))), _mm256_set1_ps(x.d)));
  }
  // Rows 8h..8h+7: d * scale_j and dmin * min_j.
  static inline __attribute__((always_inline)) void scales(const uint8_t* sb, int h, int j, __m256& a, __m256& b) {
    a = _mm256_mul_ps(halves8(sb + 16 * h), u8_floats8(sb + L::kScales + 16 * j + 8 * h));
    b = _mm256_mul_ps(halves8(sb + 32 + 16 * h), u8_floats8(sb + L::kMinsAt + 16 * j + 8 * h));
  }
  // Vector c < 4: elements 32j + 4c + k (low nibbles); c >= 4: 32j + 16 +
  // 4(c - 4) + k (high nibbles); Q5_K adds bit 4 from bit c of the qh bytes.
  static inline __attribute__((always_inline)) void quants(const uint8_t* sb, int h, int j, __m256i (&q)[8]) {
    const uint8_t* p = sb + L::kQuants + L::kSubBytes * j + 32 * h;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int c = 0; c < 4; ++c) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * c));
      q[c] = _mm256_and_si256(v, m4);
      q[c + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
    if constexpr (kFifthBit) {
      const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 256));
      const __m256i sixteen = _mm256_set1_epi8(16);
      for (int c = 0; c < 8; ++c) {
        const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << c));
        const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(hb, bit), bit);
        q[c] = _mm256_or_si256(q[c], _mm256_and_si256(set, sixteen));
      }
    }
  }
};

// Q6_K: 16 sub-blocks of 16, quants 0..63 with offset 32, int8 scales.
struct Q6K : Q6KLayout {
  static constexpr int kWiden = 2;

  static void token(const BlockQ8_K& x, TokSide& ts) {
    ts.d = x.d;
    for (int j = 0; j < 16; ++j) ts.init[j] = -32 * static_cast<int32_t>(x.bsums[j]);
  }
  static inline __attribute__((always_inline)) void scales(const uint8_t* sb, int h, int j, __m256& a, __m256& b) {
    a = _mm256_mul_ps(halves8(sb + 16 * h), i8_floats8(sb + kScales + 16 * j + 8 * h));
    b = a;  // unused
  }
  // Vector c holds elements 16j + 4c + k: low 4 bits from the low (c < 2) or
  // high nibbles of the first two vectors, top 2 bits from bits 2c, 2c + 1 of
  // the third, moved to bits 4-5.
  static inline __attribute__((always_inline)) void quants(const uint8_t* sb, int h, int j, __m256i (&q)[4]) {
    const uint8_t* p = sb + kQuants + kSubBytes * j + 32 * h;
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64));
    const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128));
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    q[0] = _mm256_or_si256(_mm256_and_si256(v0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
    q[1] = _mm256_or_si256(_mm256_and_si256(v1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v0, 4), m4), _mm256_and_si256(hb, m30));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v1, 4), m4),
                           _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
  }
};

// Half h of one group against tokens xr[0..TS): acc[t] gets rows 8h..8h+7.
template <class F, int TS>
inline __attribute__((always_inline)) void half_pass(const uint8_t* gp, int h, int64_t nb, const BlockQ8_K* const* xr,
                                                     __m256 (&acc)[TS]) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    TokSide ts[TS];
    for (int t = 0; t < TS; ++t) F::token(xr[t][b], ts[t]);
    const uint8_t* sb = gp + static_cast<size_t>(b) * F::kBytes;
    for (int j = 0; j < F::kSubs; ++j) {
      if (h == 0) {  // the same part of the next super-block
        const char* ahead = reinterpret_cast<const char*>(sb + F::kBytes + j * (F::kBytes / F::kSubs));
        for (size_t off = 0; off < F::kBytes / F::kSubs + 63; off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
      }
      __m256i q[F::kVecs];
      __m256 sc, mn;
      F::scales(sb, h, j, sc, mn);
      F::quants(sb, h, j, q);
      for (int t = 0; t < TS; ++t) {
        const int8_t* xq = xr[t][b].qs;
        __m256i s32 = F::kMins ? _mm256_setzero_si256() : _mm256_set1_epi32(ts[t].init[j]);
        for (int c0 = 0; c0 < F::kVecs; c0 += F::kWiden) {
          __m256i s16 = _mm256_maddubs_epi16(q[c0], bcast4(xq + F::act_offset(j, c0)));
          for (int c = c0 + 1; c < c0 + F::kWiden; ++c)
            s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(q[c], bcast4(xq + F::act_offset(j, c))));
          s32 = _mm256_add_epi32(s32, _mm256_madd_epi16(s16, ones));
        }
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), _mm256_mul_ps(sc, _mm256_set1_ps(ts[t].d)), acc[t]);
        if constexpr (F::kMins) acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(ts[t].dbsum[j]), mn, acc[t]);
      }
    }
  }
}

// G consecutive groups of 16 rows x T tokens; gp is the first group, gb the
// bytes of one group.
template <class F, int G, int T>
void tile(const GemmArgs& a, const uint8_t* gp, size_t gb, int64_t nb, int64_t t0, float* y) {
  for (int g = 0; g < G; ++g) {
    for (int h = 0; h < 2; ++h) {
      for (int j0 = 0; j0 < T; j0 += kSubTokens) {
        const BlockQ8_K* xr[kSubTokens];
        for (int j = 0; j < kSubTokens && j0 + j < T; ++j)
          xr[j] = reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(a.x) + (t0 + j0 + j) * a.x_stride);
        auto run = [&]<int TS>() {
          __m256 acc[TS];
          for (int t = 0; t < TS; ++t) acc[t] = _mm256_setzero_ps();
          half_pass<F, TS>(gp + g * gb, h, nb, xr, acc);
          for (int t = 0; t < TS; ++t) _mm256_storeu_ps(y + g * 16 + 8 * h + (t0 + j0 + t) * a.ldy, acc[t]);
        };
        switch (T - j0 < kSubTokens ? T - j0 : kSubTokens) {
          case 1: run.template operator()<1>(); break;
          case 2: run.template operator()<2>(); break;
          case 3: run.template operator()<3>(); break;
          default: run.template operator()<4>(); break;
        }
      }
    }
  }
}

template <class F>
void gemm_i16(const GemmArgs& a, int64_t r0, int64_t r1) {
  const int64_t nb = a.n / kQK_K;
  const size_t gb = static_cast<size_t>(nb) * F::kBytes;  // bytes of one group of 16 rows
  i16_drive(a, r0, r1, gb, [&]<int G, int T>(const uint8_t* gp, int64_t t0, float* y) {
    tile<F, G, T>(a, gp, gb, nb, t0, y);
  });
}

}  // namespace

void register_interleaved_kquants_avx2(Backend& be) {
  be.gemm_i16[static_cast<int>(DType::Q4_K)] = gemm_i16<Q45K<false>>;
  be.gemm_i16[static_cast<int>(DType::Q5_K)] = gemm_i16<Q45K<true>>;
  be.gemm_i16[static_cast<int>(DType::Q6_K)] = gemm_i16<Q6K>;
}

}  // namespace edgelm::kernels
