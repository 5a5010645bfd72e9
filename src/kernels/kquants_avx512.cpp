// AVX-512 VNNI gemm for the K formats (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) against
// Q8_K activations.
//
// A super-block of 256 elements is processed in 4 chunks of 64 (one zmm).
// For each chunk the weights are decoded once per row into 64 unsigned bytes
// (Q2_K 0..3, Q3_K 0..7, Q4_K 0..15, Q5_K 0..31, Q6_K 0..63) and multiplied
// with the 64 activation bytes of each token of the tile:
//   vpmaddubsw: u * x summed in pairs  -> 32 x int16 (at most 2*63*127, no
//               saturation)
//   vpdpwssd:   x the sub-block scale  -> 16 x int32, accumulated over the
//               super-block
// The sub-block scales are int16 lanes matching the pairs (a 32-element
// sub-block covers 16 lanes, a 16-element one 8). At the end of the
// super-block the int32 lanes are converted once and scaled by d_w * d_x.
// Weight offsets are applied through the activation's bsums (sums of 16
// quants) instead of per element:
//   Q3_K, Q6_K: value = u - offset, so subtract offset * sum_j(scale_j * bsum_j)
//               in the integer accumulator;
//   Q2_K, Q4_K, Q5_K: value = d*sc*u - dmin*m, so subtract
//               dmin * d_x * sum_j(m_j * bsum_j) in float.

#include <immintrin.h>

#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/kquant_scales.h"
#include "kernels/simd_avx512.h"
#include "kernels/tile_driver.h"

namespace edgelm::kernels {
namespace {

using namespace avx512;

// Decoded per-row state of one super-block.
struct KRow {
  __m512i sc;     // sub-block scales as int16 in the low lanes (8 or 16 of them)
  __m256i corr;   // 16 x int16 to multiply with bsums: mins (Q2/4/5_K) or scales (Q3/6_K)
  __m512i aux;    // high-bit planes broadcast to both halves (Q3_K hmask, Q5_K qh)
  float d, dmin;  // super-scales
};

inline __m512i bcast256(const uint8_t* p) {
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// 64 bytes: bit `b0` selected in the first 32, `b1` in the last 32.
inline __m512i bit_select(int b0, int b1) {
  return _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << b0)),
                            _mm256_set1_epi8(static_cast<char>(1 << b1)), 1);
}

// 2-bit fields 2k (first 32 bytes) and 2k + 2 (last 32) of 32 bytes of qs,
// for chunk c = 2h + kp: k = 2 * kp.
inline __m512i two_bit_pairs(const uint8_t* qs32, int kp) {
  const __m512i v = bcast256(qs32);
  const __m512i sh =
      _mm512_inserti64x4(_mm512_set1_epi64(4 * kp), _mm256_set1_epi64x(4 * kp + 2), 1);
  return _mm512_and_si512(_mm512_srlv_epi64(v, sh), _mm512_set1_epi8(3));
}

// Low (first 32 bytes) and high (last 32) nibbles of 32 bytes.
inline __m512i nibble_pairs(const uint8_t* qs32) {
  const __m512i v = bcast256(qs32);
  return _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0)),
                          _mm512_set1_epi8(0x0f));
}

struct Q2KFmt {
  using WB = BlockQ2_K;
  static constexpr int kOffsetShift = -1;  // no offset
  static constexpr bool kMins = true;
  static constexpr bool kSub16 = true;
  static KRow prepare(const WB& b) {
    const __m256i raw =
        _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    KRow s;
    s.sc = _mm512_castsi256_si512(_mm256_and_si256(raw, _mm256_set1_epi16(0x0f)));
    s.corr = _mm256_srli_epi16(raw, 4);
    s.aux = _mm512_setzero_si512();
    s.d = half_to_float(b.d);
    s.dmin = half_to_float(b.dmin);
    return s;
  }
  static __m512i quants(const WB& b, const KRow&, int c) {
    return two_bit_pairs(b.qs + 32 * (c >> 1), c & 1);
  }
};

struct Q3KFmt {
  using WB = BlockQ3_K;
  static constexpr int kOffsetShift = 2;  // offset 4
  static constexpr bool kMins = false;
  static constexpr bool kSub16 = true;
  static KRow prepare(const WB& b) {
    uint32_t w[4];
    unpack_q3k_biased_words(b.scales, w);
    const __m128i biased = _mm_set_epi32(static_cast<int>(w[3]), static_cast<int>(w[2]),
                                         static_cast<int>(w[1]), static_cast<int>(w[0]));
    const __m256i sc = _mm256_sub_epi16(_mm256_cvtepu8_epi16(biased), _mm256_set1_epi16(32));
    KRow s;
    s.sc = _mm512_castsi256_si512(sc);
    s.corr = sc;
    s.aux = bcast256(b.hmask);
    s.d = half_to_float(b.d);
    s.dmin = 0.0f;
    return s;
  }
  static __m512i quants(const WB& b, const KRow& s, int c) {
    const int h = c >> 1, kp = c & 1;
    const __m512i lo = two_bit_pairs(b.qs + 32 * h, kp);
    const __mmask64 hi =
        _mm512_test_epi8_mask(s.aux, bit_select(4 * h + 2 * kp, 4 * h + 2 * kp + 1));
    return _mm512_mask_add_epi8(lo, hi, lo, _mm512_set1_epi8(4));
  }
};

// Q4_K and Q5_K: 8 scales of 32-element sub-blocks, 8 mins; aux is left
// zero.
template <class WB>
inline KRow q45k_prepare(const WB& b) {
  uint64_t sc, mn;
  unpack_q4k_scale_words(b.scales, &sc, &mn);
  KRow s;
  s.sc = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(sc))));
  // Each min twice, to pair with the two bsums of its 32 elements.
  const __m256i m32 = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(mn)));
  s.corr = _mm256_or_si256(m32, _mm256_slli_epi32(m32, 16));
  s.aux = _mm512_setzero_si512();
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
  static __m512i quants(const WB& b, const KRow&, int c) { return nibble_pairs(b.qs + 32 * c); }
};

struct Q5KFmt {
  using WB = BlockQ5_K;
  static constexpr int kOffsetShift = -1;
  static constexpr bool kMins = true;
  static constexpr bool kSub16 = false;
  static KRow prepare(const WB& b) {
    KRow s = q45k_prepare(b);
    s.aux = bcast256(b.qh);
    return s;
  }
  static __m512i quants(const WB& b, const KRow& s, int c) {
    const __m512i lo = nibble_pairs(b.qs + 32 * c);
    const __mmask64 hi = _mm512_test_epi8_mask(s.aux, bit_select(2 * c, 2 * c + 1));
    return _mm512_mask_add_epi8(lo, hi, lo, _mm512_set1_epi8(16));
  }
};

struct Q6KFmt {
  using WB = BlockQ6_K;
  static constexpr int kOffsetShift = 5;  // offset 32
  static constexpr bool kMins = false;
  static constexpr bool kSub16 = true;
  static KRow prepare(const WB& b) {
    const __m256i sc =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    KRow s;
    s.sc = _mm512_castsi256_si512(sc);
    s.corr = sc;
    s.aux = _mm512_setzero_si512();
    s.d = half_to_float(b.d);
    s.dmin = 0.0f;
    return s;
  }
  // Chunk c = 2h + kp covers elements 128h + 64kp .. +63: the low nibbles
  // (kp = 0) or high nibbles (kp = 1) of ql[64h .. 64h+63], with 2-bit pairs
  // of qh[32h .. 32h+31] (bits 0-1 / 2-3, or 4-5 / 6-7) moved to bits 4-5.
  static __m512i quants(const WB& b, const KRow&, int c) {
    const int h = c >> 1, kp = c & 1;
    const __m512i ql = _mm512_loadu_si512(b.ql + 64 * h);
    const __m512i qh = bcast256(b.qh + 32 * h);
    const __m512i lo = _mm512_and_si512(kp ? _mm512_srli_epi16(ql, 4) : ql, _mm512_set1_epi8(0x0f));
    const __m512i hi = kp ? _mm512_srlv_epi64(qh, _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0))
                          : _mm512_sllv_epi64(qh, _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4));
    return _mm512_or_si512(lo, _mm512_and_si512(hi, _mm512_set1_epi8(0x30)));
  }
};

template <class F>
struct KKernel {
  using WB = typename F::WB;
  static constexpr int kRows = 2, kToks = 4;
  static constexpr int kDecodeRows = 4;

  // Lane i of the pair sums of chunk c belongs to sub-block 2c + i/16
  // (32-element sub-blocks) or 4c + i/8 (16-element ones).
  static __m512i scale_index(int c) {
    if constexpr (F::kSub16) {
      return _mm512_add_epi16(
          _mm512_set_epi64(0x0003000300030003, 0x0003000300030003, 0x0002000200020002,
                           0x0002000200020002, 0x0001000100010001, 0x0001000100010001, 0, 0),
          _mm512_set1_epi16(static_cast<short>(4 * c)));
    } else {
      return _mm512_add_epi16(_mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(1), 1),
                              _mm512_set1_epi16(static_cast<short>(2 * c)));
    }
  }

  template <int R, int T>
  static void tile(const GemmArgs& a, int64_t r, int64_t t) {
    const RowPtrs<WB, R> w(a, r);
    const TokPtrs<BlockQ8_K, T> x(a, t);
    __m512 acc[R][T];
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) acc[i][j] = _mm512_setzero_ps();

    const int64_t nb = a.n / kQK_K;
    for (int64_t sb = 0; sb < nb; ++sb) {
      KRow s[R];
      for (int i = 0; i < R; ++i) {
        prefetch_weights(&w.p[i][sb], R * w.stride, sizeof(WB));
        s[i] = F::prepare(w.p[i][sb]);
      }
      __m512i isum[R][T];
      for (int i = 0; i < R; ++i) {
        for (int j = 0; j < T; ++j) {
          if constexpr (F::kOffsetShift >= 0) {
            const __m256i bs =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.p[j][sb].bsums));
            const __m256i off =
                _mm256_slli_epi32(_mm256_madd_epi16(s[i].corr, bs), F::kOffsetShift);
            isum[i][j] = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), off));
          } else {
            isum[i][j] = _mm512_setzero_si512();
          }
        }
      }
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        __m512i xq[T];
        for (int j = 0; j < T; ++j) xq[j] = _mm512_loadu_si512(x.p[j][sb].qs + 64 * c);
        for (int i = 0; i < R; ++i) {
          const __m512i q = F::quants(w.p[i][sb], s[i], c);
          const __m512i sc = _mm512_permutexvar_epi16(scale_index(c), s[i].sc);
          for (int j = 0; j < T; ++j) {
            isum[i][j] = _mm512_dpwssd_epi32(isum[i][j], _mm512_maddubs_epi16(q, xq[j]), sc);
          }
        }
      }
      for (int i = 0; i < R; ++i) {
        for (int j = 0; j < T; ++j) {
          const float dx = x.p[j][sb].d;
          acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][j]), _mm512_set1_ps(s[i].d * dx),
                                      acc[i][j]);
          if constexpr (F::kMins) {
            const __m256i bs =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.p[j][sb].bsums));
            const __m256 mins = _mm256_cvtepi32_ps(_mm256_madd_epi16(s[i].corr, bs));
            acc[i][j] = _mm512_fnmadd_ps(_mm512_zextps256_ps512(mins),
                                         _mm512_set1_ps(s[i].dmin * dx), acc[i][j]);
          }
        }
      }
    }
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) a.y[(t + j) * a.ldy + r + i] = _mm512_reduce_add_ps(acc[i][j]);
  }
};

}  // namespace

void register_kquants_avx512(Backend& be) {
  be.gemm[static_cast<int>(DType::Q2_K)] = run_tiles<KKernel<Q2KFmt>>;
  be.gemm[static_cast<int>(DType::Q3_K)] = run_tiles<KKernel<Q3KFmt>>;
  be.gemm[static_cast<int>(DType::Q4_K)] = run_tiles<KKernel<Q4KFmt>>;
  be.gemm[static_cast<int>(DType::Q5_K)] = run_tiles<KKernel<Q5KFmt>>;
  be.gemm[static_cast<int>(DType::Q6_K)] = run_tiles<KKernel<Q6KFmt>>;
}

}  // namespace edgelm::kernels
