// AVX-512 VNNI gemm for the K formats in the interleaved layout
// (pack_kquants.cpp has the bytes): a tile is one group of 16 rows x up to 8
// tokens of Q8_K activations.
//
// Per sub-block (32 elements for Q4_K/Q5_K, 16 for Q6_K) the 16 rows' quants
// are loaded and decoded to unsigned bytes once and used for every token of
// the tile. Per token, vpdpbusd against four activation bytes broadcast to all
// lanes (4 or 8 of them) leaves the 16 rows' integer dot products of the
// sub-block in one register; one conversion and one multiply-add with the 16
// rows' d * scale (a float vector built once per tile) take it into the
// super-block's float sum. Per super-block:
//   Q4_K/Q5_K: sum = sum_j (d sc_j) dot_j - sum_j (dmin m_j) bsum_j, where
//              bsum_j is the activation's sum over sub-block j (two of its
//              bsums), one broadcast multiply-add per sub-block;
//   Q6_K:      quants are stored 0..63 (the file's q + 32), so each
//              sub-block's integer sum starts from -32 * bsums[j], which
//              removes the offset exactly.
// and the super-block sum is scaled by the token's d once. Per 32 elements and
// token that is 8 vpdpbusd, one conversion and two multiply-adds: the cost of
// Q4_0's kernel (interleaved_avx512.cpp) with the scales applied per
// sub-block. The unpacked scales are converted per tile, not per token.
//
// The loop nest around the tiles is interleaved_driver.h's, as for Q4_0.
#include <immintrin.h>

#include <cstring>

#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/interleaved_driver.h"

namespace edgelm::kernels {
namespace {


inline __m512i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// 16 f16 values at p as floats.
inline __m512 halves(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// 16 unsigned / signed bytes at p as floats.
inline __m512 u8_floats(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512 i8_floats(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// (a & c) | b, bitwise.
inline __m512i select_or(__m512i a, __m512i b, __m512i c) { return _mm512_ternarylogic_epi32(a, b, c, 0xEC); }

// What a format's sub-block loop needs per token and super-block, computed
// once per tile from the activation block: the float sums of the 8
// sub-blocks of 32 (Q4_K/Q5_K) or the integer start of the 16 sub-blocks' sums
// (Q6_K).
struct TokSide {
  alignas(64) float bsum[8];
  alignas(64) int32_t init[16];
};

// Q4_K and Q5_K: 8 sub-blocks of 32, unsigned quants, scales and minimums.
template <bool kFifthBit>
struct Q45K : Q45KLayout<kFifthBit> {
  using L = Q45KLayout<kFifthBit>;

  static inline __attribute__((always_inline)) void token(const BlockQ8_K& x, TokSide& ts) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums));
    _mm256_store_ps(ts.bsum, _mm256_cvtepi32_ps(_mm256_madd_epi16(b, _mm256_set1_epi16(1))));
  }
  // 16 rows' d * scale_j and dmin * min_j.
  static inline __attribute__((always_inline)) void scales(const uint8_t* sb, int j, __m512& a, __m512& b) {
    a = _mm512_mul_ps(halves(sb), u8_floats(sb + L::kScales + 16 * j));
    b = _mm512_mul_ps(halves(sb + 32), u8_floats(sb + L::kMinsAt + 16 * j));
  }
  // Vector c < 4: elements 32j + 4c + k (low nibbles); c >= 4: 32j + 16 +
  // 4(c - 4) + k (high nibbles). Q5_K adds bit 4 from the sub-block's qh
  // vector (bit c of each byte for vector c).
  static inline __attribute__((always_inline)) void quants(const uint8_t* sb, int j, __m512i (&q)[8]) {
    const uint8_t* p = sb + L::kQuants + L::kSubBytes * j;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int c = 0; c < 4; ++c) {
      const __m512i v = _mm512_loadu_si512(p + 64 * c);
      q[c] = _mm512_and_si512(v, m4);
      q[c + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
    if constexpr (kFifthBit) {
      const __m512i h = _mm512_loadu_si512(p + 256);
      const __m512i sixteen = _mm512_set1_epi8(16);
      for (int c = 0; c < 8; ++c) {
        const __mmask64 k = _mm512_test_epi8_mask(h, _mm512_set1_epi8(static_cast<char>(1 << c)));
        q[c] = _mm512_mask_add_epi8(q[c], k, q[c], sixteen);
      }
    }
  }
};

// Q6_K: 16 sub-blocks of 16, quants 0..63 with offset 32, int8 scales.
struct Q6K : Q6KLayout {

  static inline __attribute__((always_inline)) void token(const BlockQ8_K& x, TokSide& ts) {
    const __m512i b = _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums)));
    _mm512_store_si512(ts.init, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(b, 5)));
  }
  static inline __attribute__((always_inline)) void scales(const uint8_t* sb, int j, __m512& a, __m512& b) {
    a = _mm512_mul_ps(halves(sb), i8_floats(sb + kScales + 16 * j));
    b = a;  // unused
  }
  // Vector c holds elements 16j + 4c + k: low 4 bits from the low (c < 2) or
  // high nibbles of the first two vectors, top 2 bits from bits 2c, 2c + 1 of
  // the third, moved to bits 4-5 (16-bit shifts by at most 4 keep every
  // byte's bits 4-5 inside the byte).
  static inline __attribute__((always_inline)) void quants(const uint8_t* sb, int j, __m512i (&q)[4]) {
    const uint8_t* p = sb + kQuants + kSubBytes * j;
    const __m512i v0 = _mm512_loadu_si512(p), v1 = _mm512_loadu_si512(p + 64), h = _mm512_loadu_si512(p + 128);
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    q[0] = select_or(v0, _mm512_and_si512(_mm512_slli_epi16(h, 4), m30), m4);
    q[1] = select_or(v1, _mm512_and_si512(_mm512_slli_epi16(h, 2), m30), m4);
    q[2] = select_or(_mm512_srli_epi16(v0, 4), _mm512_and_si512(h, m30), m4);
    q[3] = select_or(_mm512_srli_epi16(v1, 4), _mm512_and_si512(_mm512_srli_epi16(h, 2), m30), m4);
  }
};

// Decode (one token) requests the same part of a later super-block (kAhead)
// non-temporal as it reads a sub-block: the weights pass once, and T0 lines
// push out the activation row every group reads again. Q6_K, 28 Qwen2-1.5B
// layers at two threads (bm_decode_layers_vs_read/14/2/2, the products'
// speed as a share of a plain read of the same bytes, medians of 3; seven
// rounds alternating the two builds, load 1.2): 0.989-0.997 against
// 0.969-0.980 with T0 in the rounds where the host let both read at one
// speed. For Q6_K three super-blocks ahead measured the same as one.
// Unlike the 32-element formats (interleaved_avx512.cpp's kPrefetch),
// decode without the requests was slower end to end: Q6_K 0.97x (`edgelm
// bench --threads 2 -p 8 -n 128 -r 1`, median of 12 alternated pairs, 9 of
// them below 1; busy). Tiles of several tokens request T0. As
// __builtin_prefetch's locality (prefetch_next_sub): 0 is prefetchnta, 3
// prefetcht0.
template <int T>
constexpr int kLocality = T == 1 ? 0 : 3;
// How many super-blocks ahead: decode F::kDecodeAhead (Q4_K and Q5_K two,
// 4.7 / 5.8 KB; Q6_K one), prompt tiles one. One ahead held Q4_K's decode
// back where the host read fast. Q4_K, AVX-512, alternated rounds on a busy
// machine: one thread over 62 MB (bm_gemv_i16/1/12/2, medians of 5) 23.8
// against 21.1 GB/s in 4 of 5 rounds; two threads
// (bm_gemv_i16_pool/12/2/2/1536) 35.7-44.2 against 27.2-39.8 in one phase,
// even in another; end to end on the Q4_K_M file (`edgelm bench --threads 2
// -p 8 -n 128 -r 1`), whose runs fall in a fast (about 60 tokens/s) or a
// slow (about 45) mode per process, the fast runs' median 63.3 against 60.1
// (7 and 10 runs), the slow ones even. Q6_K two ahead was slower on two
// threads (bm_gemv_i16_pool/14/2/2/1536 33.5-36.0 against 35.7-47.8) and not
// faster end to end. Q5_K follows Q4_K unmeasured.
template <class F, int T>
constexpr int kAhead = T == 1 ? F::kDecodeAhead : 1;

// G consecutive groups of 16 rows x T tokens; gp is the first group, gb the
// bytes of one group.
template <class F, int G, int T>
inline __attribute__((always_inline)) void tile(const GemmArgs& a, const uint8_t* gp, size_t gb, int64_t nb,
                                                int64_t t0, float* y) {
  const BlockQ8_K* xr[T];
  for (int t = 0; t < T; ++t)
    xr[t] = reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(a.x) + (t0 + t) * a.x_stride);
  __m512 acc[G][T];
  for (int g = 0; g < G; ++g)
    for (int t = 0; t < T; ++t) acc[g][t] = _mm512_setzero_ps();
  // Independent partial sums per sub-block: vpdpbusd has a latency of
  // several cycles, and with one token nothing else would fill it.
  constexpr int kParts = T * G <= 2 ? 2 : 1;
  for (int64_t b = 0; b < nb; ++b) {
    TokSide ts[T];
    for (int t = 0; t < T; ++t) F::token(xr[t][b], ts[t]);
    const uint8_t* sb[G];
    __m512 sum[G][T];
    for (int g = 0; g < G; ++g) {
      sb[g] = gp + g * gb + static_cast<size_t>(b) * F::kBytes;
      for (int t = 0; t < T; ++t) sum[g][t] = _mm512_setzero_ps();
    }
    for (int j = 0; j < F::kSubs; ++j) {
      __m512i q[G][F::kVecs];
      __m512 sc[G], mn[G];
      for (int g = 0; g < G; ++g) {
        // The same part of a later super-block of this group.
        prefetch_next_sub<F, kLocality<T>, kAhead<F, T>>(sb[g], j);
        F::scales(sb[g], j, sc[g], mn[g]);
        F::quants(sb[g], j, q[g]);
      }
      for (int t = 0; t < T; ++t) {
        const int8_t* xq = xr[t][b].qs;
        for (int g = 0; g < G; ++g) {
          __m512i s[kParts];
          if constexpr (F::kMins) s[0] = _mm512_setzero_si512();
          else s[0] = _mm512_set1_epi32(ts[t].init[j]);
          for (int p = 1; p < kParts; ++p) s[p] = _mm512_setzero_si512();
          for (int c = 0; c < F::kVecs; ++c)
            s[c % kParts] = _mm512_dpbusd_epi32(s[c % kParts], q[g][c], bcast4(xq + F::act_offset(j, c)));
          for (int p = 1; p < kParts; ++p) s[0] = _mm512_add_epi32(s[0], s[p]);
          sum[g][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[0]), sc[g], sum[g][t]);
          if constexpr (F::kMins) sum[g][t] = _mm512_fnmadd_ps(_mm512_set1_ps(ts[t].bsum[j]), mn[g], sum[g][t]);
        }
      }
    }
    for (int t = 0; t < T; ++t) {
      const __m512 dx = _mm512_set1_ps(xr[t][b].d);
      for (int g = 0; g < G; ++g) acc[g][t] = _mm512_fmadd_ps(sum[g][t], dx, acc[g][t]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + g * 16 + (t0 + t) * a.ldy, acc[g][t]);
}

template <class F>
void gemm_i16(const GemmArgs& a, int64_t r0, int64_t r1) {
  const int64_t nb = a.n / kQK_K;
  const size_t gb = static_cast<size_t>(nb) * F::kBytes;  // bytes of one group of 16 rows
  i16_drive(a, r0, r1, Groups<false>{gb},
            [&]<int G, int T>(const uint8_t* gp, int64_t t0, float* y) {
              tile<F, G, T>(a, gp, gb, nb, t0, y);
            });
}

}  // namespace

void register_interleaved_kquants_avx512(Backend& be) {
  be.gemm_i16[static_cast<int>(DType::Q4_K)] = gemm_i16<Q45K<false>>;
  be.gemm_i16[static_cast<int>(DType::Q5_K)] = gemm_i16<Q45K<true>>;
  be.gemm_i16[static_cast<int>(DType::Q6_K)] = gemm_i16<Q6K>;
}

}  // namespace edgelm::kernels
