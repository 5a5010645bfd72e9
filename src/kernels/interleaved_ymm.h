// Internal: the gemms over the interleaved layout (pack.cpp, pack_kquants.cpp)
// on 256-bit vectors, compiled twice: interleaved_avx2.cpp (AVX2) and
// interleaved_avxvnni.cpp (AVX2 + AVX-VNNI: Intel Alder Lake and later
// client cores, the N100, Zen 5). The two differ only in dot_lanes.
//
// A group of 16 rows is taken as two halves of 8 (one 32-bit lane per row).
// Per half and block (sub-block for the K formats) the quants are loaded and
// decoded to unsigned bytes once (eight registers) and used for up to four
// tokens. Per token, each quant vector meets four activation bytes broadcast
// to every lane. One token (decode) instead takes both halves block by block
// in one pass (whole_pass): each weight line is read once, not a second time
// from L2 for the second half, and each activation broadcast serves both.
// Tiles of Q4_0, Q4_1 and Q4_K on AVX2 take both halves too (pair_pass),
// chunk by chunk: four quant vectors live at a time, up to four tokens, and
// each broadcast serves both halves.
//
//   AVX2: vpmaddubsw (u8 x s8 -> pairs summed in 16 bits), and the 16-bit
//     vectors added while they cannot overflow (a pair is at most 2 x 127 x
//     the largest quant): eight for Q4_0, Q4_1 and Q4_K (quants < 16: 8 x
//     3810), four for Q5_0, Q5_1 and Q5_K (< 32), two for Q6_K (< 64), then
//     one vpmaddwd with ones widens them. Q8_0 takes its sign off the quants
//     first (Q8_0Y).
//   AVX-VNNI: one vpdpbusd per vector sums the four products into the int32
//     lane; two chains of partial sums hide its latency.
//
// The integer sum starts from -offset x the block's activation sum (the
// row's trailer; Q4_0, Q5_0 and Q8_0 with VNNI) or from -32 x the
// sub-block's activation sum (Q6_K), which removes the format's offset
// exactly; then one conversion and one multiply-add apply the scales (the K
// formats fold the token's d into the sub-block scale, and take their
// minimums off with the activation's sub-block sums; Q4_1 and Q5_1, read
// without an offset, add m x the Q8_1 block's s).
//
// The loop nest around the tiles is interleaved_driver.h's. Internal linkage,
// as that header: only for files compiled with the AVX2 flags.
#pragma once

#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/interleaved_driver.h"

namespace edgelm::kernels {
namespace {

constexpr int kSubTokens = 4;  // tokens per pass over a half's decoded quants
constexpr int kPairTokens = 4;  // tokens per pair_pass (both halves)
#if defined(__AVXVNNI__)
constexpr bool kPairPasses = false;  // AVX-VNNI keeps the half passes (vpdpbusd)
#else
constexpr bool kPairPasses = true;
#endif

inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// init + the dot products of quant vectors q[0..N) (unsigned bytes, four per
// row lane) with the four activation bytes at xq + off(c) for each c, one
// int32 per row. kWiden: how many vpmaddubsw results may be added in 16 bits
// (AVX2 only).
template <int N, int kWiden, class Off>
inline __attribute__((always_inline)) __m256i dot_lanes(__m256i init, const __m256i (&q)[N], const int8_t* xq,
                                                        Off off) {
#if defined(__AVXVNNI__)
  static_assert(N % 2 == 0);
  __m256i s0 = init, s1 = _mm256_setzero_si256();
  for (int c = 0; c < N; c += 2) {
    s0 = _mm256_dpbusd_avx_epi32(s0, q[c], bcast4(xq + off(c)));
    s1 = _mm256_dpbusd_avx_epi32(s1, q[c + 1], bcast4(xq + off(c + 1)));
  }
  return _mm256_add_epi32(s0, s1);
#else
  static_assert(N % kWiden == 0);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i s32 = init;
  for (int c0 = 0; c0 < N; c0 += kWiden) {
    __m256i s16 = _mm256_maddubs_epi16(q[c0], bcast4(xq + off(c0)));
    for (int c = c0 + 1; c < c0 + kWiden; ++c) {
      s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(q[c], bcast4(xq + off(c))));
      __asm__("" : "+x"(s16));  // as in pair_sums (Q4_K tiles: about 6% faster)
    }
    s32 = _mm256_add_epi32(s32, _mm256_madd_epi16(s16, ones));
  }
  return s32;
#endif
}

// The pair passes' 16-bit sums of one block (Legacy) or sub-block (KQuant)
// of 32, both halves, tokens t < TS: chunk(h, c, lo, hi) decodes chunk c of
// half h (lo meets the activation bytes at xq[t] + off(c), hi those at
// xq[t] + off(c + 4)). Eight products per half and token: formats of
// kWiden 8 only.
template <int TS, class Chunk, class Off>
inline __attribute__((always_inline)) void pair_sums(Chunk chunk, const int8_t* const (&xq)[TS], Off off,
                                                     __m256i (&s16)[TS][2]) {
  for (int c = 0; c < 4; ++c) {
    __m256i l0, h0, l1, h1;
    chunk(0, c, l0, h0);
    chunk(1, c, l1, h1);
    for (int t = 0; t < TS; ++t) {
      const __m256i bl = bcast4(xq[t] + off(c)), bh = bcast4(xq[t] + off(c + 4));
      const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(l0, bl), _mm256_maddubs_epi16(h0, bh));
      const __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(l1, bl), _mm256_maddubs_epi16(h1, bh));
      s16[t][0] = c == 0 ? p0 : _mm256_add_epi16(s16[t][0], p0);
      s16[t][1] = c == 0 ? p1 : _mm256_add_epi16(s16[t][1], p1);
      // Each sum is due in a register here: without this, GCC's
      // reassociation computes all of a block's products before adding
      // any, and spills them (kernel bench gemm_i16_prompt, Q4_0: 44 ->
      // 36 ms on a Zen 1 core).
      __asm__("" : "+x"(s16[t][0]), "+x"(s16[t][1]));
    }
  }
}

// ---- Q4_0, Q5_0, Q4_1, Q5_1 and Q8_0: blocks of 32, one f16 scale (and
// minimum) per row and block ---------------------------------------------------

// The nibble formats, rows 8h..8h+7 of one packed block: q[0..3] are
// elements 4c..4c+3 (low nibbles of chunk c, at L::kQuants + 64c), q[4..7]
// elements 16+4c.. (high), read as unsigned q; the sum starts from -kOff x
// the activations' sum. X: the activation block (Q4_1 and Q5_1 meet Q8_1
// rows, whose s = d x the block's sum carries the minimum's term).
template <class L, int32_t kOff, class X = BlockQ8_0>
struct NibblesY : L {
  using XB = X;
  static constexpr int32_t kOffset = kOff;
  static constexpr bool kHasMins = std::is_same_v<X, BlockQ8_1>;
  static constexpr bool kSignFix = false;
  static constexpr int kWiden = 8;  // pair sums up to 2 x 15 x 127: eight fit 16 bits
  static constexpr int act_offset(int c) { return Q4_0Layout::act_offset(c); }
  // Chunk c of half h alone: q[c] (lo) and q[c + 4] (hi) of quants().
  static inline __attribute__((always_inline)) void chunk(const uint8_t* blk, int h, int c, __m256i& lo,
                                                          __m256i& hi) {
    const __m256i m = _mm256_set1_epi8(0x0F);
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + L::kQuants + 64 * c + 32 * h));
    lo = _mm256_and_si256(v, m);
    hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
  }
  static inline __attribute__((always_inline)) void nibbles(const uint8_t* blk, int h, __m256i (&q)[8]) {
    for (int c = 0; c < 4; ++c) chunk(blk, h, c, q[c], q[c + 4]);
  }
  static inline __attribute__((always_inline)) void quants(const uint8_t* blk, int h, __m256i (&q)[8]) {
    nibbles(blk, h, q);
  }
};

// Q5_0 and Q5_1: the nibbles with 16 added where the fifth bit is set (its
// inverted bit clear, moved to bit 4 of each byte by a 16-bit shift that
// keeps every bit in its byte). Pair sums up to 2 x 31 x 127 = 7874: four
// fit 16 bits.
template <class L, int32_t kOff, class X = BlockQ8_0>
struct FifthsY : NibblesY<L, kOff, X> {
  static constexpr int kWiden = 4;
  static inline __attribute__((always_inline)) void quants(const uint8_t* blk, int h, __m256i (&q)[8]) {
    const __m256i b16 = _mm256_set1_epi8(0x10);
    const __m256i inv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + L::kHigh + 32 * h));
    __m256i n[8];
    NibblesY<L, kOff, X>::nibbles(blk, h, n);
    q[0] = _mm256_andnot_si256(_mm256_slli_epi16(inv, 4), b16);
    q[1] = _mm256_andnot_si256(_mm256_slli_epi16(inv, 3), b16);
    q[2] = _mm256_andnot_si256(_mm256_slli_epi16(inv, 2), b16);
    q[3] = _mm256_andnot_si256(_mm256_slli_epi16(inv, 1), b16);
    q[4] = _mm256_andnot_si256(inv, b16);
    q[5] = _mm256_andnot_si256(_mm256_srli_epi16(inv, 1), b16);
    q[6] = _mm256_andnot_si256(_mm256_srli_epi16(inv, 2), b16);
    q[7] = _mm256_andnot_si256(_mm256_srli_epi16(inv, 3), b16);
    for (int c = 0; c < 8; ++c) q[c] = _mm256_or_si256(q[c], n[c]);
  }
};

using Q4_0Y = NibblesY<Q4_0Layout, 8>;
using Q5_0Y = FifthsY<Q5_0Layout, 16>;
using Q4_1Y = NibblesY<Q4_1Layout, 0, BlockQ8_1>;
using Q5_1Y = FifthsY<Q5_1Layout, 0, BlockQ8_1>;

// Q8_0 as packed on x86 (q + 128): q[c] is elements 4c..4c+3. With VNNI,
// vpdpbusd takes them as they are. Without it, q + 128 (up to 255) times 127
// overflows a vpmaddubsw pair sum, so the AVX2 build takes the signed quant
// back (XOR 0x80) and multiplies |q| (at most 128) by x with q's sign
// (vpsignb): pair sums at most 2 x 128 x 127 = 32512, widened after every
// vector. That needs q and |q| per vector, so its loop runs vectors outside
// and tokens inside (two live quant registers instead of eight).
struct Q8_0Y : Q8_0Layout {
  static_assert(kQ8_0PackedBias == 0x80, "the packed quants are q + 128");
  using XB = BlockQ8_0;
  static constexpr bool kHasMins = false;
#if defined(__AVXVNNI__)
  static constexpr bool kSignFix = false;
#else
  static constexpr bool kSignFix = true;
#endif
  static constexpr int kWiden = 1;
  static inline __attribute__((always_inline)) __m256i vec(const uint8_t* blk, int h, int c) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQuants + 64 * c + 32 * h));
  }
  static inline __attribute__((always_inline)) void quants(const uint8_t* blk, int h, __m256i (&q)[8]) {
    for (int c = 0; c < 8; ++c) q[c] = vec(blk, h, c);
  }
};
template <class F>
struct Legacy {
  static constexpr int kPrefetch = 8;  // blocks ahead in the weight stream
  static int64_t blocks(const GemmArgs& a) { return a.n / 32; }
  static Groups<F::kPaired> groups(const GemmArgs& a) { return groups_of<F>(a); }

  // Prompt passes: every 64 bytes of one group's block kPrefetch blocks
  // ahead from its start (interleaved_avx512.cpp's tile says why).
  static inline __attribute__((always_inline)) void prefetch(const uint8_t* blk) {
    prefetch_from<F::kBlock, 3>(blk + kPrefetch * F::kStep);
  }

  // Tokens xr[0..TS) against half h of one group, accumulated into acc over every block.
  template <int TS>
  static inline __attribute__((always_inline)) void half_pass(const uint8_t* gp, int h, int64_t nb,
                                                              const uint8_t* const* xr, __m256 (&acc)[TS]) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = gp + static_cast<size_t>(b) * F::kStep;
      if (h == 0) prefetch(blk);
      block<TS>(blk, h, b, nb, xr, acc);
    }
  }

  // Whether tiles of several tokens take both halves at once (pair_pass):
  // the nibble formats whose eight products fit 16 bits (kWiden 8: Q4_0 and
  // Q4_1, unsigned q, so no sign fix), on AVX2.
  static constexpr bool kPairs = kPairPasses && F::kWiden == 8 && requires { &F::chunk; };
  static_assert(!kPairs || !F::kSignFix, "pair_pass multiplies q as it is loaded");

  // Tokens xr[0..TS) against both halves of one group, block by block,
  // chunk by chunk: a 32-byte chunk of each half gives four quant vectors
  // (low and high nibbles), and each token's two activation broadcasts
  // serve both halves. Half the broadcasts of two half_passes, and four
  // quant registers live instead of eight; the block's eight products per
  // half are summed in 16 bits (kWiden 8) and widened once.
  template <int TS>
  static inline __attribute__((always_inline)) void pair_pass(const uint8_t* gp, int64_t nb,
                                                              const uint8_t* const* xr, __m256 (&lo)[TS],
                                                              __m256 (&hi)[TS]) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = gp + static_cast<size_t>(b) * F::kStep;
      prefetch(blk);
      const typename F::XB* xb[TS];
      for (int t = 0; t < TS; ++t) xb[t] = reinterpret_cast<const typename F::XB*>(xr[t]) + b;
      const int8_t* xq[TS];
      for (int t = 0; t < TS; ++t) xq[t] = xb[t]->qs;
      __m256i s16[TS][2];
      pair_sums<TS>([blk](int h, int c, __m256i& ql, __m256i& qh) { F::chunk(blk, h, c, ql, qh); }, xq,
                    [](int c) { return F::act_offset(c); }, s16);
      const __m256 dw0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
      const __m256 dw1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16)));
      for (int t = 0; t < TS; ++t) {
        const __m256i init = _mm256_set1_epi32(i16_start<F, typename F::XB>(xr[t], nb, b));
        const __m256 dx = _mm256_set1_ps(_cvtsh_ss(xb[t]->d));
        const __m256i a0 = _mm256_add_epi32(init, _mm256_madd_epi16(s16[t][0], ones));
        const __m256i a1 = _mm256_add_epi32(init, _mm256_madd_epi16(s16[t][1], ones));
        lo[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a0), _mm256_mul_ps(dw0, dx), lo[t]);
        hi[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a1), _mm256_mul_ps(dw1, dx), hi[t]);
        if constexpr (F::kHasMins) {
          const __m256 s = _mm256_set1_ps(_cvtsh_ss(xb[t]->s));
          lo[t] = _mm256_fmadd_ps(
              _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + F::kMinsAt))), s, lo[t]);
          hi[t] = _mm256_fmadd_ps(
              _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + F::kMinsAt + 16))), s, hi[t]);
        }
      }
    }
  }

  // One token against both halves of G groups (G = 2: a pair, whose second
  // group's blocks follow the first's) in one pass: each block's weights
  // are read once (not again from L2 for the second half), and each
  // activation block serves all 16 G rows. It requests nothing ahead: the
  // stream prefetcher keeps ahead of one stream (interleaved_avx512.cpp's
  // kPrefetch). AVX2 on Zen 4, 28 Qwen2-1.5B layers
  // (bm_decode_layers_vs_read/{2,8}/1/{1,2}, three alternated rounds,
  // busy), without the requests against eight blocks ahead: Q4_0 one
  // thread 0.90-0.93 against 0.87-0.89, two threads 0.94-0.96 against
  // 0.79-0.97; Q8_0 one thread 0.92-0.98 against 0.88-0.92, two threads
  // 0.90-0.98 against 0.90-0.99.
  template <int G>
  static inline __attribute__((always_inline)) void whole_pass(const uint8_t* gp, int64_t nb,
                                                               const uint8_t* const* xr,
                                                               __m256 (&lo)[G], __m256 (&hi)[G]) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = gp + static_cast<size_t>(b) * F::kStep;
      for (int g = 0; g < G; ++g) {
        __m256 l[1] = {lo[g]}, h[1] = {hi[g]};
        block<1>(blk + g * F::kBlock, 0, b, nb, xr, l);
        block<1>(blk + g * F::kBlock, 1, b, nb, xr, h);
        lo[g] = l[0];
        hi[g] = h[0];
      }
    }
  }

  // Block b of half h, tokens xr[0..TS).
  template <int TS>
  static inline __attribute__((always_inline)) void block(const uint8_t* blk, int h, int64_t b, int64_t nb,
                                                          const uint8_t* const* xr, __m256 (&acc)[TS]) {
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h)));
    if constexpr (F::kSignFix) {
      const __m256i ones = _mm256_set1_epi16(1), bias = _mm256_set1_epi8(static_cast<char>(0x80));
      __m256i s32[TS];
      for (int j = 0; j < TS; ++j) s32[j] = _mm256_setzero_si256();
      for (int c = 0; c < 8; ++c) {
        const __m256i w = _mm256_xor_si256(F::vec(blk, h, c), bias);
        const __m256i aw = _mm256_abs_epi8(w);
        for (int j = 0; j < TS; ++j) {
          const int8_t* xq = (reinterpret_cast<const BlockQ8_0*>(xr[j]) + b)->qs + F::act_offset(c);
          const __m256i p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast4(xq), w));
          s32[j] = _mm256_add_epi32(s32[j], _mm256_madd_epi16(p16, ones));
        }
      }
      for (int j = 0; j < TS; ++j) {
        const auto* xb = reinterpret_cast<const BlockQ8_0*>(xr[j]) + b;
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32[j]), _mm256_mul_ps(dw, _mm256_set1_ps(_cvtsh_ss(xb->d))),
                                 acc[j]);
      }
      return;
    }
    __m256i q[8];
    F::quants(blk, h, q);
    __m256 mw;
    if constexpr (F::kHasMins)
      mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + F::kMinsAt + 16 * h)));
    for (int j = 0; j < TS; ++j) {
      const auto* xb = reinterpret_cast<const typename F::XB*>(xr[j]) + b;
      const __m256i s32 =
          dot_lanes<8, F::kWiden>(_mm256_set1_epi32(i16_start<F, typename F::XB>(xr[j], nb, b)), q, xb->qs,
                                  [](int c) { return F::act_offset(c); });
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), _mm256_mul_ps(dw, _mm256_set1_ps(_cvtsh_ss(xb->d))), acc[j]);
      // Q4_1 and Q5_1: + m x s, ggml's term for the minimum.
      if constexpr (F::kHasMins) acc[j] = _mm256_fmadd_ps(mw, _mm256_set1_ps(_cvtsh_ss(xb->s)), acc[j]);
    }
  }
};

// ---- the K formats: super-blocks of 256 ------------------------------------

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
struct Q45KY : Q45KLayout<kFifthBit> {
  using L = Q45KLayout<kFifthBit>;
  static constexpr int kWiden = kFifthBit ? 4 : 8;

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

// Q4_K's chunk c of sub-block j, half h alone: q[c] (lo) and q[c + 4] (hi)
// of quants().
struct Q4KY : Q45KY<false> {
  static inline __attribute__((always_inline)) void chunk(const uint8_t* sb, int h, int j, int c, __m256i& lo,
                                                          __m256i& hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i v =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + kQuants + kSubBytes * j + 32 * h + 64 * c));
    lo = _mm256_and_si256(v, m4);
    hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  }
};

// Q6_K: 16 sub-blocks of 16, quants 0..63 with offset 32, int8 scales.
struct Q6KY : Q6KLayout {
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

template <class F>
struct KQuant {
  static int64_t blocks(const GemmArgs& a) { return a.n / kQK_K; }
  static Groups<false> groups(const GemmArgs& a) {
    return {static_cast<size_t>(blocks(a)) * F::kBytes};
  }

  // The loop nest of every pass: the group's super-blocks [0, nb) at gp,
  // the TS tokens' sides of each (TokSide), then body(sb, j, xr, b, ts) for
  // each sub-block j of super-block b (at sb).
  template <int TS, class Body>
  static inline __attribute__((always_inline)) void each_sub(const uint8_t* gp, int64_t nb,
                                                             const uint8_t* const* xrow,
                                                             Body&& body) {
    const BlockQ8_K* xr[TS];
    for (int t = 0; t < TS; ++t) xr[t] = reinterpret_cast<const BlockQ8_K*>(xrow[t]);
    for (int64_t b = 0; b < nb; ++b) {
      TokSide ts[TS];
      for (int t = 0; t < TS; ++t) F::token(xr[t][b], ts[t]);
      const uint8_t* sb = gp + static_cast<size_t>(b) * F::kBytes;
      for (int j = 0; j < F::kSubs; ++j) body(sb, j, xr, b, ts);
    }
  }

  template <int TS>
  static inline __attribute__((always_inline)) void half_pass(const uint8_t* gp, int h, int64_t nb,
                                                              const uint8_t* const* xrow,
                                                              __m256 (&acc)[TS]) {
    each_sub<TS>(
        gp, nb, xrow,
        [h, &acc](const uint8_t* sb, int j, const BlockQ8_K* const* xr, int64_t b,
                  const TokSide (&ts)[TS]) __attribute__((always_inline)) {
          if (h == 0) prefetch(sb, j);
          sub<TS>(sb, h, j, xr, b, ts, acc);
        });
  }

  // Whether tiles of several tokens take both halves at once: Q4_K on AVX2
  // (Legacy::pair_pass).
  static constexpr bool kPairs = kPairPasses && requires { &F::chunk; };

  // Legacy::pair_pass for a format of 8 sub-blocks of 32 with minimums:
  // per sub-block, chunk by chunk, both halves against each token's two
  // broadcasts; the eight products per half summed in 16 bits.
  template <int TS>
  static inline __attribute__((always_inline)) void pair_pass(const uint8_t* gp, int64_t nb,
                                                              const uint8_t* const* xrow,
                                                              __m256 (&lo)[TS], __m256 (&hi)[TS]) {
    static_assert(F::kMins && F::kWiden == 8 && F::kVecs == 8);
    const __m256i ones = _mm256_set1_epi16(1);
    each_sub<TS>(
        gp, nb, xrow,
        [ones, &lo, &hi](const uint8_t* sb, int j, const BlockQ8_K* const* xr, int64_t b,
                         const TokSide (&ts)[TS]) __attribute__((always_inline)) {
          prefetch(sb, j);
          const int8_t* xq[TS];
          for (int t = 0; t < TS; ++t) xq[t] = xr[t][b].qs;
          __m256i s16[TS][2];
          pair_sums<TS>(
              [sb, j](int h, int c, __m256i& ql, __m256i& qh) { F::chunk(sb, h, j, c, ql, qh); },
              xq, [j](int c) { return F::act_offset(j, c); }, s16);
          __m256 sc0, mn0, sc1, mn1;
          F::scales(sb, 0, j, sc0, mn0);
          F::scales(sb, 1, j, sc1, mn1);
          for (int t = 0; t < TS; ++t) {
            const __m256 d = _mm256_set1_ps(ts[t].d), dbsum = _mm256_set1_ps(ts[t].dbsum[j]);
            const __m256i a0 = _mm256_madd_epi16(s16[t][0], ones),
                          a1 = _mm256_madd_epi16(s16[t][1], ones);
            lo[t] = _mm256_fnmadd_ps(
                dbsum, mn0, _mm256_fmadd_ps(_mm256_cvtepi32_ps(a0), _mm256_mul_ps(sc0, d), lo[t]));
            hi[t] = _mm256_fnmadd_ps(
                dbsum, mn1, _mm256_fmadd_ps(_mm256_cvtepi32_ps(a1), _mm256_mul_ps(sc1, d), hi[t]));
          }
        });
  }

  // One token against both halves in one pass (Legacy::whole_pass), with
  // a later super-block requested as the prompt passes do: unlike the
  // 32-element formats, taking the requests out did not gain here (AVX2 on
  // Zen 4, bm_decode_layers_vs_read/12/1/1, two alternated rounds, busy:
  // Q4_K one thread 0.74-0.78 against 0.84 with them). F::kDecodeAhead
  // super-blocks ahead (Q4_K and Q5_K two), as on AVX-512: Q4_K on one
  // thread over 62 MB (bm_gemv_i16/1/12/1, medians of 5, alternated
  // rounds, busy) 23.7-25.9 against 23.0-23.9 GB/s, ahead in all 4 rounds;
  // on two threads (bm_gemv_i16_pool/12/1/2/1536) median 46.7 against
  // 45.3, ahead in 5 of 8.
  template <int G>
  static inline __attribute__((always_inline)) void whole_pass(const uint8_t* gp, int64_t nb,
                                                               const uint8_t* const* xrow,
                                                               __m256 (&lo)[G], __m256 (&hi)[G]) {
    static_assert(G == 1, "the K formats' groups are not paired");
    each_sub<1>(
        gp, nb, xrow,
        [&lo, &hi](const uint8_t* sb, int j, const BlockQ8_K* const* xr, int64_t b,
                   const TokSide (&ts)[1]) __attribute__((always_inline)) {
          prefetch_decode(sb, j);
          sub<1>(sb, 0, j, xr, b, ts, lo);
          sub<1>(sb, 1, j, xr, b, ts, hi);
        });
  }

  // The same part of the next super-block as sub-block j; decode's
  // (whole_pass), of the super-block F::kDecodeAhead after sb.
  static inline __attribute__((always_inline)) void prefetch(const uint8_t* sb, int j) {
    prefetch_next_sub<F, 3>(sb, j);
  }
  static inline __attribute__((always_inline)) void prefetch_decode(const uint8_t* sb, int j) {
    prefetch_next_sub<F, 3, F::kDecodeAhead>(sb, j);
  }

  // Sub-block j of super-block b (at sb), half h, tokens xr[0..TS).
  template <int TS>
  static inline __attribute__((always_inline)) void sub(const uint8_t* sb, int h, int j, const BlockQ8_K* const* xr,
                                                        int64_t b, const TokSide (&ts)[TS], __m256 (&acc)[TS]) {
    __m256i q[F::kVecs];
    __m256 sc, mn;
    F::scales(sb, h, j, sc, mn);
    F::quants(sb, h, j, q);
    for (int t = 0; t < TS; ++t) {
      const __m256i init = F::kMins ? _mm256_setzero_si256() : _mm256_set1_epi32(ts[t].init[j]);
      const __m256i s32 =
          dot_lanes<F::kVecs, F::kWiden>(init, q, xr[t][b].qs, [j](int c) { return F::act_offset(j, c); });
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), _mm256_mul_ps(sc, _mm256_set1_ps(ts[t].d)), acc[t]);
      if constexpr (F::kMins) acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(ts[t].dbsum[j]), mn, acc[t]);
    }
  }
};

// ---- the tile, shared by both families ---------------------------------------

// G groups of 16 rows x T tokens (G = 2 only for a pair of a paired format
// and one token); gp is the first group, y the first row's output column
// for token 0 of the tile.
template <class K, int G, int T>
void tile(const GemmArgs& a, const uint8_t* gp, int64_t nb, int64_t t0, float* y) {
  if constexpr (T == 1) {
    const uint8_t* xr[1] = {static_cast<const uint8_t*>(a.x) + t0 * a.x_stride};
    __m256 lo[G], hi[G];
    for (int g = 0; g < G; ++g) lo[g] = hi[g] = _mm256_setzero_ps();
    K::template whole_pass<G>(gp, nb, xr, lo, hi);
    for (int g = 0; g < G; ++g) {
      _mm256_storeu_ps(y + g * 16 + t0 * a.ldy, lo[g]);
      _mm256_storeu_ps(y + g * 16 + 8 + t0 * a.ldy, hi[g]);
    }
    return;
  } else {
    static_assert(G == 1, "several tokens take one group per tile");
  }
  if constexpr (K::kPairs) {
    for (int j0 = 0; j0 < T; j0 += kPairTokens) {
      const uint8_t* xr[kPairTokens];
      for (int j = 0; j < kPairTokens && j0 + j < T; ++j)
        xr[j] = static_cast<const uint8_t*>(a.x) + (t0 + j0 + j) * a.x_stride;
      auto run = [&]<int TS>() {
        __m256 lo[TS], hi[TS];
        for (int t = 0; t < TS; ++t) lo[t] = hi[t] = _mm256_setzero_ps();
        K::template pair_pass<TS>(gp, nb, xr, lo, hi);
        for (int t = 0; t < TS; ++t) {
          _mm256_storeu_ps(y + (t0 + j0 + t) * a.ldy, lo[t]);
          _mm256_storeu_ps(y + 8 + (t0 + j0 + t) * a.ldy, hi[t]);
        }
      };
      const int rem = T - j0 < kPairTokens ? T - j0 : kPairTokens;
      [&]<int... I>(std::integer_sequence<int, I...>) {
        ((rem == I + 1 ? run.template operator()<I + 1>() : void()), ...);
      }
      (std::make_integer_sequence<int, kPairTokens>{});
    }
    return;
  }
  for (int h = 0; h < 2; ++h) {
    for (int j0 = 0; j0 < T; j0 += kSubTokens) {
      const uint8_t* xr[kSubTokens];
      for (int j = 0; j < kSubTokens && j0 + j < T; ++j)
        xr[j] = static_cast<const uint8_t*>(a.x) + (t0 + j0 + j) * a.x_stride;
      auto run = [&]<int TS>() {
        __m256 acc[TS];
        for (int t = 0; t < TS; ++t) acc[t] = _mm256_setzero_ps();
        K::template half_pass<TS>(gp, h, nb, xr, acc);
        for (int t = 0; t < TS; ++t) _mm256_storeu_ps(y + 8 * h + (t0 + j0 + t) * a.ldy, acc[t]);
      };
      switch (T - j0 < kSubTokens ? T - j0 : kSubTokens) {
        case 1:
          run.template operator()<1>();
          break;
        case 2:
          run.template operator()<2>();
          break;
        case 3:
          run.template operator()<3>();
          break;
        default:
          run.template operator()<4>();
          break;
      }
    }
  }
}

template <class K>
void gemm_ymm(const GemmArgs& a, int64_t r0, int64_t r1) {
  const int64_t nb = K::blocks(a);
  i16_drive(a, r0, r1, K::groups(a), [&]<int G, int T>(const uint8_t* gp, int64_t t0, float* y) {
    tile<K, G, T>(a, gp, nb, t0, y);
  });
}

// Every kernel of the interleaved layout on 256-bit vectors.
inline void register_ymm_common(GemmFn (&gemm_i16)[kNumDTypeSlots]) {
  gemm_i16[static_cast<int>(DType::Q4_0)] = gemm_ymm<Legacy<Q4_0Y>>;
  gemm_i16[static_cast<int>(DType::Q8_0)] = gemm_ymm<Legacy<Q8_0Y>>;
  gemm_i16[static_cast<int>(DType::Q5_0)] = gemm_ymm<Legacy<Q5_0Y>>;
  gemm_i16[static_cast<int>(DType::Q4_1)] = gemm_ymm<Legacy<Q4_1Y>>;
  gemm_i16[static_cast<int>(DType::Q5_1)] = gemm_ymm<Legacy<Q5_1Y>>;
  gemm_i16[static_cast<int>(DType::Q4_K)] = gemm_ymm<KQuant<Q4KY>>;
  gemm_i16[static_cast<int>(DType::Q5_K)] = gemm_ymm<KQuant<Q45KY<true>>>;
  gemm_i16[static_cast<int>(DType::Q6_K)] = gemm_ymm<KQuant<Q6KY>>;
}

}  // namespace
}  // namespace edgelm::kernels
