// Internal: the pieces of the NEON interleaved gemm (interleaved_neon.cpp)
// that its i8mm variant (interleaved_neon_i8mm.cpp) shares: the quarter
// loaders, the sdot of four rows against a block, the decode pass over a
// group and the sdot prompt pass over a quarter. See interleaved_neon.cpp
// for the layout as NEON reads it.
//
// Internal linkage, as interleaved_driver.h: only for files compiled with
// NEON's target flags (or a superset).
#pragma once

#include <arm_neon.h>

#include <type_traits>

#include "kernels/blocks.h"
#include "kernels/interleaved_driver.h"
#include "kernels/simd_neon.h"

namespace edgelm::kernels {
namespace {

using namespace neon;

constexpr int kPrefetch = 8;    // blocks ahead in the weight stream
constexpr int kSubTokens = 4;   // tokens per pass over a quarter's quants

// The block kPrefetch blocks past blk in the stream, into L1: a pair's
// (G = 2) whole lines, each line once over the stream; one group's block
// every 64 bytes from its start (the x86 prompt tiles do the same; an odd
// group's block starts mid-line, interleaved_avx512.cpp's tile).
template <class F, int G = 1>
inline void prefetch_block(const uint8_t* blk) {
  if constexpr (G == 2) {
    prefetch_lines<G * F::kBlock, 3>(blk + kPrefetch * F::kStep);
  } else {
    prefetch_from<F::kBlock, 3>(blk + kPrefetch * F::kStep);
  }
}

// Eight quant vectors of one quarter of a packed block: q[i] for i < 4 meets
// activation bytes 4i.. (lane i of the block's first 16 bytes), q[4 + i]
// bytes 16 + 4i.. (lane i of the second 16).
//
// The nibble chunks at L::kQuants, unsigned (0..15).
template <class L>
inline __attribute__((always_inline)) void load_nibbles(const uint8_t* blk, int k, int8x16_t (&q)[8]) {
  const uint8x16_t m = vdupq_n_u8(0x0F);
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const uint8x16_t v = load_u8(blk + L::kQuants + 64 * c + 16 * k);
    q[c] = as_s8(vandq_u8(v, m));
    q[c + 4] = as_s8(vshrq_n_u8(v, 4));
  }
}
// The nibbles with their fifth bits at L::kHigh, as signed values q - 16
// (-16..15): a byte of the quarter's fifth-bit vector holds, for its
// position, the inverted fifth bits of chunk c's low (bit c) and high (bit
// 4 + c) elements (pack.cpp), so one test gives 0xff where the value is the
// nibble minus 16, whose top four bits are exactly those of the signed
// value; one bit-select (low) or shift-insert (high) joins it to the nibble.
template <class L>
inline __attribute__((always_inline)) void load_five_bits(const uint8_t* blk, int k, int8x16_t (&q)[8]) {
  const uint8x16_t m = vdupq_n_u8(0x0F);
  const uint8x16_t high = load_u8(blk + L::kHigh + 16 * k);
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const uint8x16_t v = load_u8(blk + L::kQuants + 64 * c + 16 * k);
    const uint8x16_t lo16 = vtstq_u8(high, vdupq_n_u8(static_cast<uint8_t>(1u << c)));
    const uint8x16_t hi16 = vtstq_u8(high, vdupq_n_u8(static_cast<uint8_t>(16u << c)));
    q[c] = as_s8(vbslq_u8(m, v, lo16));
    q[c + 4] = as_s8(vsriq_n_u8(hi16, v, 4));
  }
}

// A format as the passes below read it: kBlock bytes per block of a group,
// kStep from one block of a group to its next (GroupBlocks),
// load() its quant vectors, which exceed the true quants by kOffset (the
// sum starts from -kOffset x the activations' sum, i16_start), XB the
// activation block; kHasMins: Q4_1/Q5_1's minimums m, whose term is m x the
// activation block's s (= d_x x its sum), as in ggml's vec_dot.
//
// The nibble formats: L their layout, kFifthBits whether the fifth bits
// join them (as q - 16), kOff the offset, X the activation block (Q8_1 for
// the formats with minimums).
template <class Lay, bool kFifthBits, int32_t kOff, class X>
struct NibbleQuarter {
  using L = Lay;
  using XB = X;
  static constexpr size_t kBlock = L::kBlock, kStep = L::kStep;
  static constexpr bool kPaired = L::kPaired;
  static constexpr int32_t kOffset = kOff;
  static constexpr bool kHasMins = std::is_same_v<X, BlockQ8_1>;
  static inline __attribute__((always_inline)) void load(const uint8_t* blk, int k, int8x16_t (&q)[8]) {
    if constexpr (kFifthBits) {
      load_five_bits<L>(blk, k, q);
    } else {
      load_nibbles<L>(blk, k, q);
    }
  }
};
using Q4_0Quarter = NibbleQuarter<Q4_0Layout, false, 8, BlockQ8_0>;
using Q5_0Quarter = NibbleQuarter<Q5_0Layout, true, 0, BlockQ8_0>;
// Q4_1: q (0..15) exactly as loaded.
using Q4_1Quarter = NibbleQuarter<Q4_1Layout, false, 0, BlockQ8_1>;
// Q5_1: q (0..31) is loaded as Q5_0's q - 16 and the sum starts from +16 x
// the activations' sum: the integer dot product of q itself, so the
// minimum's term is ggml's m x s and not (m + 16d) x s, which would carry
// s's f16 rounding times 16d.
using Q5_1Quarter = NibbleQuarter<Q5_1Layout, true, -16, BlockQ8_1>;

struct Q8_0Quarter {
  static constexpr size_t kBlock = Q8_0Layout::kBlock, kStep = Q8_0Layout::kStep;
  static constexpr bool kPaired = Q8_0Layout::kPaired;
  static constexpr int32_t kOffset = 0;
  static constexpr bool kHasMins = false;
  using XB = BlockQ8_0;
  static inline __attribute__((always_inline)) void load(const uint8_t* blk, int k, int8x16_t (&q)[8]) {
    static_assert(kQ8_0PackedBias == 0, "NEON reads the packed quants as signed bytes");
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) q[c] = load_s8(blk + 32 + 64 * c + 16 * k);
  }
};

// s + the four rows' dot products with one block's activations (lo: bytes
// 0..15, hi: 16..31). Lanes are immediates, hence no loop.
inline __attribute__((always_inline)) int32x4_t dot8(int32x4_t s, const int8x16_t (&q)[8], int8x16_t lo,
                                                     int8x16_t hi) {
  s = vdotq_laneq_s32(s, q[0], lo, 0);
  s = vdotq_laneq_s32(s, q[1], lo, 1);
  s = vdotq_laneq_s32(s, q[2], lo, 2);
  s = vdotq_laneq_s32(s, q[3], lo, 3);
  s = vdotq_laneq_s32(s, q[4], hi, 0);
  s = vdotq_laneq_s32(s, q[5], hi, 1);
  s = vdotq_laneq_s32(s, q[6], hi, 2);
  return vdotq_laneq_s32(s, q[7], hi, 3);
}

// Where block b's integer sums start for the activation row xr.
template <class F>
inline int32x4_t start(const uint8_t* xr, int64_t nb, int64_t b) {
  return vdupq_n_s32(i16_start<F, typename F::XB>(xr, nb, b));
}

// Four f16 values (rows 4k..4k+3) at p + 8k as floats: a packed block's
// scales (p = blk) or minimums (blk + kMinsAt).
inline float32x4_t quarter_halves(const uint8_t* p, int k) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p + 8 * k))));
}
inline float32x4_t quarter_scales(const uint8_t* blk, int k) { return quarter_halves(blk, k); }

// acc + the four rows' block sum s (integer) scaled by d_w x d_x, plus with
// minimums m_w x s_x.
template <class F>
inline __attribute__((always_inline)) float32x4_t block_fma(float32x4_t acc, int32x4_t s, const uint8_t* blk, int k,
                                                            const typename F::XB& xb) {
  acc = vfmaq_f32(acc, vcvtq_f32_s32(s), vmulq_n_f32(quarter_scales(blk, k), half_to_float(xb.d)));
  if constexpr (F::kHasMins) acc = vfmaq_n_f32(acc, quarter_halves(blk + F::L::kMinsAt, k), half_to_float(xb.s));
  return acc;
}

// Decode: one token against all 16 rows of G groups (G = 2: both groups of
// a pair, the second's blocks kBlock after the first's), every block once.
template <class F, int G>
void decode_group(const uint8_t* gp, int64_t nb, const uint8_t* xr, float* y) {
  float32x4_t acc[G][4];
#pragma GCC unroll 8
  for (int i = 0; i < 4 * G; ++i) acc[i / 4][i % 4] = vdupq_n_f32(0.0f);
  const auto* xb = reinterpret_cast<const typename F::XB*>(xr);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = gp + static_cast<size_t>(b) * F::kStep;
    prefetch_block<F, G>(blk);
    const int8x16_t lo = load_s8(xb[b].qs), hi = load_s8(xb[b].qs + 16);
    const int32x4_t s0 = start<F>(xr, nb, b);
#pragma GCC unroll 8
    for (int i = 0; i < 4 * G; ++i) {
      const uint8_t* gb = blk + (i / 4) * F::kBlock;
      int8x16_t q[8];
      F::load(gb, i % 4, q);
      acc[i / 4][i % 4] = block_fma<F>(acc[i / 4][i % 4], dot8(s0, q, lo, hi), gb, i % 4, xb[b]);
      // The second group's loads after the first group's sums: hoisted
      // above them, 16 quant vectors and 8 accumulators outgrow the 32
      // registers and GCC spills accumulators every block.
      if (G == 2 && i == 3) asm volatile("" ::: "memory");
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < 4 * G; ++i) vst1q_f32(y + 16 * (i / 4) + 4 * (i % 4), acc[i / 4][i % 4]);
}

// Prompt: TS tokens (activation rows xr[0..TS)) against quarter k of a group,
// the outputs of token j stored at y[j * ldy + 4k ..].
template <class F, int TS>
void quarter_pass(const uint8_t* gp, int k, int64_t nb, const uint8_t* const* xr, float* y, int64_t ldy) {
  float32x4_t acc[TS];
#pragma GCC unroll 4
  for (int j = 0; j < TS; ++j) acc[j] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = gp + static_cast<size_t>(b) * F::kStep;
    if (k == 0) prefetch_block<F>(blk);  // the first of a group's four passes
    int8x16_t q[8];
    F::load(blk, k, q);
#pragma GCC unroll 4
    for (int j = 0; j < TS; ++j) {
      const auto* xb = reinterpret_cast<const typename F::XB*>(xr[j]) + b;
      const int32x4_t s = dot8(start<F>(xr[j], nb, b), q, load_s8(xb->qs), load_s8(xb->qs + 16));
      acc[j] = block_fma<F>(acc[j], s, blk, k, *xb);
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < TS; ++j) vst1q_f32(y + j * ldy + 4 * k, acc[j]);
}

// Decode of the 32-element formats (the K formats bring their own, with
// the same signature; xr is the token's activation row).
struct BlockDecode {
  template <class F, int G>
  static void run(const uint8_t* gp, int64_t nb, const uint8_t* xr, float* y) {
    decode_group<F, G>(gp, nb, xr, y);
  }
};

// G groups of 16 rows x T tokens from t0 (G = 2 only for both groups of a
// pair and one token, interleaved_driver.h); y is the first group's first
// output for token 0 of the matrix. Decode runs D::run<F, G>(gp, nb, xr,
// y); prompts run P::run<F, TS>(gp, k, nb, xr, y, ldy) for each quarter k
// of the group and sub-tile of TS <= kSubTokens tokens.
template <class P, class F, class D, int G, int T>
void group_tile(const GemmArgs& a, const uint8_t* gp, int64_t nb, int64_t t0, float* y) {
  static_assert(G == 1 || T == 1);
  if constexpr (T == 1) {
    D::template run<F, G>(gp, nb, static_cast<const uint8_t*>(a.x) + t0 * a.x_stride,
                          y + t0 * a.ldy);
  } else {
    for (int j0 = 0; j0 < T; j0 += kSubTokens) {
      const uint8_t* xr[kSubTokens];
      for (int j = 0; j < kSubTokens && j0 + j < T; ++j)
        xr[j] = static_cast<const uint8_t*>(a.x) + (t0 + j0 + j) * a.x_stride;
      float* yj = y + (t0 + j0) * a.ldy;
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        switch (T - j0 < kSubTokens ? T - j0 : kSubTokens) {
          case 1: P::template run<F, 1>(gp, k, nb, xr, yj, a.ldy); break;
          case 2: P::template run<F, 2>(gp, k, nb, xr, yj, a.ldy); break;
          case 3: P::template run<F, 3>(gp, k, nb, xr, yj, a.ldy); break;
          default: P::template run<F, 4>(gp, k, nb, xr, yj, a.ldy); break;
        }
      }
    }
  }
}

// nb blocks of 32 per row (groups 16 rows of the file apart), or with a
// K format (F::kBytes: one packed super-block of a group) nb super-blocks.
template <class P, class F, class D = BlockDecode>
void gemm_i16(const GemmArgs& a, int64_t r0, int64_t r1) {
  constexpr bool kSuper = requires { F::kBytes; };
  const int64_t nb = a.n / (kSuper ? kQK_K : 32);
  auto tile = [&]<int G, int T>(const uint8_t* gp, int64_t t0, float* y) {
    group_tile<P, F, D, G, T>(a, gp, nb, t0, y);
  };
  if constexpr (kSuper) {
    i16_drive(a, r0, r1, Groups<false>{static_cast<size_t>(nb) * F::kBytes}, tile);
  } else {
    i16_drive(a, r0, r1, groups_of<F>(a), tile);
  }
}

}  // namespace
}  // namespace edgelm::kernels
