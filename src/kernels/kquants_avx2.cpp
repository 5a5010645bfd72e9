// AVX2 gemm for the K formats (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) against Q8_K
// activations.
//
// A super-block of 256 is processed in 8 chunks of 32 (one ymm). Per chunk
// and row the weights are decoded once into 32 unsigned bytes, then for each
// token of the tile:
//   vpmaddubsw: u * x summed in pairs -> 16 x int16 (at most 2*63*127)
//   vpmaddwd:   x the sub-block scale -> 8 x int32, summed over the super-block
// The scales come from a register of 8 int32 lanes, each holding one scale
// twice as int16 (so vpermd picks the scale of a lane group): a chunk covers
// one 32-element sub-block (Q4_K, Q5_K) or two 16-element ones (lanes 0-3 and
// 4-7). Offsets are applied through the activation's bsums, as in
// kquants_avx512.cpp: integer for Q3_K/Q6_K, float (dmin) for Q2/4/5_K.

#include <immintrin.h>

#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/kquant_scales.h"
#include "kernels/simd_avx2.h"
#include "kernels/tile_driver.h"

namespace edgelm::kernels {
namespace {

using namespace avx2;

// Decoded per-row state of one super-block.
struct KRow {
  __m256i sc[2];  // scales 0-7 and 8-15, each as int16 twice in an int32 lane
  __m256i corr;   // 16 x int16 to pair with bsums: mins (Q2/4/5_K) or scales (Q3/6_K)
  float d, dmin;
};

// 8 int32 lanes (values fitting int16) -> each lane holds its value twice as int16.
inline __m256i dup16(__m256i v) {
  return _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(v, 16));
}

// 0xff in byte l where `bit` is set in m[l].
inline __m256i bit_set(__m256i m, int bit) {
  const __m256i b = _mm256_set1_epi8(static_cast<char>(1 << bit));
  return _mm256_cmpeq_epi8(_mm256_and_si256(m, b), b);
}

// 16 signed scales as bytes -> KRow::sc and corr.
inline void signed_scales16(__m128i s8, KRow* s) {
  s->sc[0] = dup16(_mm256_cvtepi8_epi32(s8));
  s->sc[1] = dup16(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(s8, s8)));
  s->corr = _mm256_cvtepi8_epi16(s8);
}

struct Q2KFmt {
  using WB = BlockQ2_K;
  static constexpr int kOffsetShift = -1;
  static constexpr bool kMins = true;
  static constexpr bool kSub16 = true;
  static KRow prepare(const WB& b) {
    const __m128i raw = load128(b.scales);
    const __m128i sc = _mm_and_si128(raw, _mm_set1_epi8(0x0f));
    KRow s;
    s.sc[0] = dup16(_mm256_cvtepu8_epi32(sc));
    s.sc[1] = dup16(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(sc, sc)));
    s.corr = _mm256_srli_epi16(_mm256_cvtepu8_epi16(raw), 4);
    s.d = half_to_float(b.d);
    s.dmin = half_to_float(b.dmin);
    return s;
  }
  // Chunk j = 4h + k: bits 2k of qs[32h .. 32h+31].
  static __m256i quants(const WB& b, int j) {
    return _mm256_and_si256(_mm256_srli_epi16(load256(b.qs + 32 * (j >> 2)), 2 * (j & 3)),
                            _mm256_set1_epi8(3));
  }
};

struct Q3KFmt {
  using WB = BlockQ3_K;
  static constexpr int kOffsetShift = 2;  // value = u - 4
  static constexpr bool kMins = false;
  static constexpr bool kSub16 = true;
  static KRow prepare(const WB& b) {
    uint32_t w[4];
    unpack_q3k_biased_words(b.scales, w);
    const __m128i biased = _mm_set_epi32(static_cast<int>(w[3]), static_cast<int>(w[2]),
                                         static_cast<int>(w[1]), static_cast<int>(w[0]));
    KRow s;
    signed_scales16(_mm_sub_epi8(biased, _mm_set1_epi8(32)), &s);
    s.d = half_to_float(b.d);
    s.dmin = 0.0f;
    return s;
  }
  // Chunk j = 4h + k: low bits as Q2_K, high bit 4h + k of hmask[l].
  static __m256i quants(const WB& b, int j) {
    const int h = j >> 2, k = j & 3;
    const __m256i lo =
        _mm256_and_si256(_mm256_srli_epi16(load256(b.qs + 32 * h), 2 * k), _mm256_set1_epi8(3));
    const __m256i hi = _mm256_and_si256(bit_set(load256(b.hmask), 4 * h + k), _mm256_set1_epi8(4));
    return _mm256_or_si256(lo, hi);
  }
};

// Q4_K and Q5_K: 8 scales of 32-element sub-blocks, 8 mins.
template <class WB>
inline KRow q45k_prepare(const WB& b) {
  uint64_t sc, mn;
  unpack_q4k_scale_words(b.scales, &sc, &mn);
  KRow s;
  s.sc[0] = dup16(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(sc))));
  s.sc[1] = s.sc[0];
  s.corr =
      dup16(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(mn))));  // each min twice
  s.d = half_to_float(b.d);
  s.dmin = half_to_float(b.dmin);
  return s;
}

struct Q4KFmt {
  using WB = BlockQ4_K;
  static constexpr int kOffsetShift = -1;
  static constexpr bool kMins = true;
  static constexpr bool kSub16 = false;
  static KRow prepare(const WB& b) { return q45k_prepare(b); }
  // Chunk j: nibble j % 2 of qs[32 * (j / 2) ..].
  static __m256i quants(const WB& b, int j) {
    return _mm256_and_si256(_mm256_srli_epi16(load256(b.qs + 32 * (j >> 1)), 4 * (j & 1)),
                            _mm256_set1_epi8(0x0f));
  }
};

struct Q5KFmt {
  using WB = BlockQ5_K;
  static constexpr int kOffsetShift = -1;
  static constexpr bool kMins = true;
  static constexpr bool kSub16 = false;
  static KRow prepare(const WB& b) { return q45k_prepare(b); }
  static __m256i quants(const WB& b, int j) {
    const __m256i lo = _mm256_and_si256(
        _mm256_srli_epi16(load256(b.qs + 32 * (j >> 1)), 4 * (j & 1)), _mm256_set1_epi8(0x0f));
    return _mm256_or_si256(lo, _mm256_and_si256(bit_set(load256(b.qh), j), _mm256_set1_epi8(16)));
  }
};

struct Q6KFmt {
  using WB = BlockQ6_K;
  static constexpr int kOffsetShift = 5;  // value = u - 32
  static constexpr bool kMins = false;
  static constexpr bool kSub16 = true;
  static KRow prepare(const WB& b) {
    KRow s;
    signed_scales16(load128(b.scales), &s);
    s.d = half_to_float(b.d);
    s.dmin = 0.0f;
    return s;
  }
  // Chunk j = 4h + k: nibble k / 2 of ql[64h + 32 (k % 2) ..], bits 2k of
  // qh[32h ..] moved to bits 4-5.
  static __m256i quants(const WB& b, int j) {
    const int h = j >> 2, k = j & 3;
    const __m256i ql = load256(b.ql + 64 * h + 32 * (k & 1));
    const __m256i lo =
        _mm256_and_si256(_mm256_srli_epi16(ql, 4 * (k >> 1)), _mm256_set1_epi8(0x0f));
    const __m256i qh = load256(b.qh + 32 * h);
    const __m256i moved = k == 0   ? _mm256_slli_epi16(qh, 4)
                          : k == 1 ? _mm256_slli_epi16(qh, 2)
                          : k == 2 ? qh
                                   : _mm256_srli_epi16(qh, 2);
    return _mm256_or_si256(lo, _mm256_and_si256(moved, _mm256_set1_epi8(0x30)));
  }
};

template <class F>
struct KKernel {
  using WB = typename F::WB;
  static constexpr int kRows = 2, kToks = 2;
  static constexpr int kDecodeRows = 2;

  // The int16 scale pairs of chunk j: lanes 0-3 sub-block 2j and lanes 4-7
  // sub-block 2j + 1 (16-element sub-blocks), or all lanes sub-block j.
  static __m256i chunk_scales(const KRow& s, int j) {
    if constexpr (F::kSub16) {
      const int base = 2 * (j & 3);
      return _mm256_permutevar8x32_epi32(
          s.sc[j >> 2],
          _mm256_set_epi32(base + 1, base + 1, base + 1, base + 1, base, base, base, base));
    } else {
      return _mm256_permutevar8x32_epi32(s.sc[0], _mm256_set1_epi32(j));
    }
  }

  template <int R, int T>
  static void tile(const GemmArgs& a, int64_t r, int64_t t) {
    const RowPtrs<WB, R> w(a, r);
    const TokPtrs<BlockQ8_K, T> x(a, t);
    __m256 acc[R][T];
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) acc[i][j] = _mm256_setzero_ps();

    const int64_t nb = a.n / kQK_K;
    for (int64_t sb = 0; sb < nb; ++sb) {
      KRow s[R];
      for (int i = 0; i < R; ++i) {
        prefetch_weights(&w.p[i][sb], R * w.stride, sizeof(WB));
        s[i] = F::prepare(w.p[i][sb]);
      }
      __m256i isum[R][T];
      for (int i = 0; i < R; ++i) {
        for (int j = 0; j < T; ++j) {
          if constexpr (F::kOffsetShift >= 0) {
            const __m256i bs = load256(x.p[j][sb].bsums);
            isum[i][j] = _mm256_sub_epi32(
                _mm256_setzero_si256(),
                _mm256_slli_epi32(_mm256_madd_epi16(s[i].corr, bs), F::kOffsetShift));
          } else {
            isum[i][j] = _mm256_setzero_si256();
          }
        }
      }
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        __m256i xq[T];
        for (int j = 0; j < T; ++j) xq[j] = load256(x.p[j][sb].qs + 32 * c);
        for (int i = 0; i < R; ++i) {
          const __m256i q = F::quants(w.p[i][sb], c);
          const __m256i sc = chunk_scales(s[i], c);
          for (int j = 0; j < T; ++j) {
            isum[i][j] =
                _mm256_add_epi32(isum[i][j], _mm256_madd_epi16(_mm256_maddubs_epi16(q, xq[j]), sc));
          }
        }
      }
      for (int i = 0; i < R; ++i) {
        for (int j = 0; j < T; ++j) {
          const float dx = x.p[j][sb].d;
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i][j]), _mm256_set1_ps(s[i].d * dx),
                                      acc[i][j]);
          if constexpr (F::kMins) {
            const __m256 mins =
                _mm256_cvtepi32_ps(_mm256_madd_epi16(s[i].corr, load256(x.p[j][sb].bsums)));
            acc[i][j] = _mm256_fnmadd_ps(mins, _mm256_set1_ps(s[i].dmin * dx), acc[i][j]);
          }
        }
      }
    }
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) a.y[(t + j) * a.ldy + r + i] = hsum(acc[i][j]);
  }
};

}  // namespace

void register_kquants_avx2(Backend& be) {
  be.gemm[static_cast<int>(DType::Q2_K)] = run_tiles<KKernel<Q2KFmt>>;
  be.gemm[static_cast<int>(DType::Q3_K)] = run_tiles<KKernel<Q3KFmt>>;
  be.gemm[static_cast<int>(DType::Q4_K)] = run_tiles<KKernel<Q4KFmt>>;
  be.gemm[static_cast<int>(DType::Q5_K)] = run_tiles<KKernel<Q5KFmt>>;
  be.gemm[static_cast<int>(DType::Q6_K)] = run_tiles<KKernel<Q6KFmt>>;
}

}  // namespace edgelm::kernels
