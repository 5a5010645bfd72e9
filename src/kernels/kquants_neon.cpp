// NEON (dotprod) gemm for the K formats (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)
// against Q8_K activations: one kernel for the formats with 16 groups of 16
// (GroupKernel: Q2_K, Q3_K, Q6_K) and one for 8 sub-blocks of 32 with
// minimums (Q45KKernel: Q4_K, Q5_K). Each decodes a row's quants once per
// tile for up to four tokens, adds each group's sdot times its scale by mla
// by lane, and converts once per super-block.

#include <arm_neon.h>

#include <cstring>
#include <type_traits>

#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/kquant_scales.h"
#include "kernels/simd_neon.h"
#include "kernels/tile_driver.h"

namespace edgelm::kernels {
namespace {

using namespace neon;

// The float sums of an R x T tile: zeroed, then each lane sum stored to its
// output (every K kernel below).
template <int R, int T>
inline void zero_sums(float32x4_t (&acc)[R][T]) {
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < T; ++j) acc[i][j] = vdupq_n_f32(0.0f);
  }
}
template <int R, int T>
inline void store_sums(const GemmArgs& a, int64_t r, int64_t t, const float32x4_t (&acc)[R][T]) {
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < T; ++j) a.y[(t + j) * a.ldy + r + i] = vaddvq_f32(acc[i][j]);
  }
}

// The formats of 16 groups of 16 with one scale per group: Q2_K, Q3_K and
// Q6_K. They place their elements alike: group k (0..3) of super-block half
// h at byte offset l0 (0 or 16) is elements 128h + 32k + l0 .. + 15, with
// scale 8h + 2k + l0 / 16, and its low bits are bits 2k (Q2_K, Q3_K) or a
// nibble (Q6_K) of one 16-byte load shared by the four groups. So one or
// two loads give four groups at once, each in a few bit operations
// (shifts, bit-field inserts sli/sri, a select), and the quants stay
// unsigned: a format's offset (Q3_K's 4, Q6_K's 32) is taken off once per
// super-block through the activation's bsums, sum_g sc_g (q_g - o) . x_g =
// sum_g sc_g (q_g . x_g) - o sum_g sc_g bsum_g; Q2_K's minimums meet the
// bsums the same way and go into the float sum with dmin. A row's 16 scales
// become one int8x16 per super-block; each group's dot product is added
// times its scale by mla by lane. Per row and 64 weights: one to three
// loads, 6-14 bit operations, four sdot and four multiply-adds.
//
// Bounds: a lane of one sdot is at most 4 x 63 x 127; times a scale (|s| <=
// 128) and over 16 groups, about 66 M; the offset lane at most 32 x 4 x 128
// x 2032: both far inside int32.

struct Q2KGroups {
  using WB = BlockQ2_K;
  static constexpr int kOffsetShift = -1;  // no offset
  static constexpr bool kMins = true;
  static inline __attribute__((always_inline)) int8x16_t scales(const WB& b) {
    return as_s8(vandq_u8(load_u8(b.scales), vdupq_n_u8(0x0f)));
  }
  static inline __attribute__((always_inline)) int8x16_t mins(const WB& b) {
    return as_s8(vshrq_n_u8(load_u8(b.scales), 4));
  }
  static inline __attribute__((always_inline)) void groups(const WB& b, int h, int l0, int8x16_t (&w)[4]) {
    const uint8x16_t q = load_u8(b.qs + 32 * h + l0), m3 = vdupq_n_u8(3);
    w[0] = as_s8(vandq_u8(q, m3));
    w[1] = as_s8(vandq_u8(vshrq_n_u8(q, 2), m3));
    w[2] = as_s8(vandq_u8(vshrq_n_u8(q, 4), m3));
    w[3] = as_s8(vshrq_n_u8(q, 6));
  }
};

struct Q3KGroups {
  using WB = BlockQ3_K;
  static constexpr int kOffsetShift = 2;  // 4
  static constexpr bool kMins = false;
  static inline __attribute__((always_inline)) int8x16_t scales(const WB& b) {
    uint32_t words[4];
    unpack_q3k_biased_words(b.scales, words);
    return vsubq_s8(vreinterpretq_s8_u32(vld1q_u32(words)), vdupq_n_s8(32));
  }
  static inline __attribute__((always_inline)) int8x16_t mins(const WB&) { return vdupq_n_s8(0); }
  // Bits 2k of qs and bit 4h + k of hmask: 0..7, the value plus 4.
  static inline __attribute__((always_inline)) void groups(const WB& b, int h, int l0, int8x16_t (&w)[4]) {
    const uint8x16_t q = load_u8(b.qs + 32 * h + l0);
    uint8x16_t hm = load_u8(b.hmask + l0);
    if (h) hm = vshrq_n_u8(hm, 4);
    const uint8x16_t m3 = vdupq_n_u8(3), m7 = vdupq_n_u8(7);
    // (low bits of the first) | (bit 2 of the second), then & 7.
    w[0] = as_s8(vandq_u8(vbslq_u8(m3, q, vshlq_n_u8(hm, 2)), m7));
    w[1] = as_s8(vandq_u8(vbslq_u8(m3, vshrq_n_u8(q, 2), vshlq_n_u8(hm, 1)), m7));
    w[2] = as_s8(vandq_u8(vbslq_u8(m3, vshrq_n_u8(q, 4), hm), m7));
    w[3] = as_s8(vandq_u8(vbslq_u8(m3, vshrq_n_u8(q, 6), vshrq_n_u8(hm, 1)), m7));
  }
};

struct Q6KGroups {
  using WB = BlockQ6_K;
  static constexpr int kOffsetShift = 5;  // 32
  static constexpr bool kMins = false;
  static inline __attribute__((always_inline)) int8x16_t scales(const WB& b) { return load_s8(b.scales); }
  static inline __attribute__((always_inline)) int8x16_t mins(const WB&) { return vdupq_n_s8(0); }
  // Low nibbles from ql (two loads), the top two bits from qh (one load).
  static inline __attribute__((always_inline)) void groups(const WB& b, int h, int l0, int8x16_t (&w)[4]) {
    const uint8x16_t ql0 = load_u8(b.ql + 64 * h + l0), ql1 = load_u8(b.ql + 64 * h + 32 + l0);
    const uint8x16_t qh = load_u8(b.qh + 32 * h + l0), qh2 = vshrq_n_u8(qh, 2);
    const uint8x16_t m6 = vdupq_n_u8(0x3f);
    w[0] = as_s8(vandq_u8(vsliq_n_u8(ql0, qh, 4), m6));                  // ql0 & 15 | qh bits 0-1
    w[1] = as_s8(vandq_u8(vsliq_n_u8(ql1, qh2, 4), m6));                 // ql1 & 15 | qh bits 2-3
    w[2] = as_s8(vsriq_n_u8(vandq_u8(qh, vdupq_n_u8(0x30)), ql0, 4));  // ql0 >> 4 | qh bits 4-5
    w[3] = as_s8(vsriq_n_u8(qh2, ql1, 4));                              // ql1 >> 4 | qh bits 6-7
  }
};

// sum_g v_g * bsum_g over the 16 groups, spread over four lanes.
inline __attribute__((always_inline)) int32x4_t bsum_dot(int8x16_t v, const BlockQ8_K& x) {
  const int16x8_t v0 = vmovl_s8(vget_low_s8(v)), v1 = vmovl_high_s8(v);
  const int16x8_t b0 = vld1q_s16(x.bsums), b1 = vld1q_s16(x.bsums + 8);
  int32x4_t c = vmull_s16(vget_low_s16(v0), vget_low_s16(b0));
  c = vmlal_high_s16(c, v0, b0);
  c = vmlal_s16(c, vget_low_s16(v1), vget_low_s16(b1));
  return vmlal_high_s16(c, v1, b1);
}

template <class F>
struct GroupKernel {
  using WB = typename F::WB;
  static constexpr int kRows = 2, kToks = 4;
  static constexpr int kDecodeRows = 2;

  // s + the four groups' dot products, each times its scale: group k of
  // byte half L has scale 2k + L of the half super-block (sc0: 0..3, sc1: 4..7).
  template <int L>
  static inline __attribute__((always_inline)) int32x4_t scaled_dots(int32x4_t s, const int8x16_t (&w)[4],
                                                                     const int8x16_t (&x)[4], int32x4_t sc0,
                                                                     int32x4_t sc1) {
    const int32x4_t z = vdupq_n_s32(0);
    s = vmlaq_laneq_s32(s, vdotq_s32(z, w[0], x[0]), sc0, L);
    s = vmlaq_laneq_s32(s, vdotq_s32(z, w[1], x[1]), sc0, 2 + L);
    s = vmlaq_laneq_s32(s, vdotq_s32(z, w[2], x[2]), sc1, L);
    return vmlaq_laneq_s32(s, vdotq_s32(z, w[3], x[3]), sc1, 2 + L);
  }

  // Quarter (H, L) of a super-block for every row and token of the tile. A
  // row's eight scales of half H are loaded (from sc, where the super-block's
  // start left them) and widened here rather than kept across quarters:
  // registers are short (the rows' sums, the activations, four groups and
  // their temporaries).
  template <int R, int T, int H, int L>
  static inline __attribute__((always_inline)) void quarter(const RowPtrs<WB, R>& w, const TokPtrs<BlockQ8_K, T>& x,
                                                            int64_t sb, const int8_t (&sc)[R][16],
                                                            int32x4_t (&isum)[R][T]) {
    int8x16_t xv[T][4];
#pragma GCC unroll 4
    for (int j = 0; j < T; ++j) {
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) xv[j][k] = load_s8(x.p[j][sb].qs + 128 * H + 32 * k + 16 * L);
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const int16x8_t s16 = vmovl_s8(vld1_s8(sc[i] + 8 * H));
      const int32x4_t sc0 = vmovl_s16(vget_low_s16(s16)), sc1 = vmovl_high_s16(s16);
      int8x16_t wv[4];
      F::groups(w.p[i][sb], H, 16 * L, wv);
#pragma GCC unroll 4
      for (int j = 0; j < T; ++j) isum[i][j] = scaled_dots<L>(isum[i][j], wv, xv[j], sc0, sc1);
    }
  }

  template <int R, int T>
  static void tile(const GemmArgs& a, int64_t r, int64_t t) {
    const RowPtrs<WB, R> w(a, r);
    const TokPtrs<BlockQ8_K, T> x(a, t);
    float32x4_t acc[R][T];
    zero_sums(acc);

    const int64_t nb = a.n / kQK_K;
    for (int64_t sb = 0; sb < nb; ++sb) {
      int32x4_t isum[R][T];
      int8_t sc[R][16];
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const WB& b = w.p[i][sb];
        prefetch_weights(&b, R * w.stride, sizeof(WB));
        const int8x16_t sc8 = F::scales(b);
        vst1q_s8(sc[i], sc8);
#pragma GCC unroll 4
        for (int j = 0; j < T; ++j) {
          if constexpr (F::kOffsetShift >= 0) {
            // -offset sum_g sc_g bsum_g, spread over lanes
            isum[i][j] = vnegq_s32(vshlq_n_s32(bsum_dot(sc8, x.p[j][sb]), F::kOffsetShift));
          } else {
            isum[i][j] = vdupq_n_s32(0);
          }
          if constexpr (F::kMins) {
            const int32x4_t m = bsum_dot(F::mins(b), x.p[j][sb]);
            acc[i][j] = vfmsq_n_f32(acc[i][j], vcvtq_f32_s32(m), half_to_float(b.dmin) * x.p[j][sb].d);
          }
        }
      }
      quarter<R, T, 0, 0>(w, x, sb, sc, isum);
      quarter<R, T, 0, 1>(w, x, sb, sc, isum);
      quarter<R, T, 1, 0>(w, x, sb, sc, isum);
      quarter<R, T, 1, 1>(w, x, sb, sc, isum);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const float dw = half_to_float(w.p[i][sb].d);
#pragma GCC unroll 4
        for (int j = 0; j < T; ++j)
          acc[i][j] = vfmaq_n_f32(acc[i][j], vcvtq_f32_s32(isum[i][j]), dw * x.p[j][sb].d);
      }
    }
    store_sums(a, r, t, acc);
  }
};

// Q4_K and Q5_K: 8 sub-blocks of 32 with 6-bit scales and minimums. A
// generic kernel that kept a row's scales in an array (which GCC's -O3
// peeled into scalars and spilled) took 1.06 instructions a weight for Q5_K
// and 0.71 for Q4_K per decode call under qemu. Here a row's eight scales are two
// int32x4 (unpacked four bytes at a time, kquant_scales.h) and each
// sub-block's dot product is added times its scale by mla by lane; the
// minimums meet the activation's bsums (pairs of 16, one per sub-block) once
// per super-block and go straight into the float sum. Per row and 64
// weights: two loads, two AND and two shifts for the nibbles (Q5_K: a shift,
// an AND and an OR more per vector for the fifth bit), four sdot, two
// multiply-adds.
//
// Bounds: a lane of a sub-block's two sdot is at most 2 x 4 x 31 x 127, times
// a scale of at most 63 and over 8 sub-blocks, under 16 M.
template <class WB>
struct Q45KKernel {
  static constexpr bool kFifth = std::is_same_v<WB, BlockQ5_K>;
  static constexpr int kRows = 2, kToks = 4;
  static constexpr int kDecodeRows = 2;

  // Bit 4 of each byte = bit B of h (B known at compile time), the rest 0.
  template <int B>
  static inline __attribute__((always_inline)) uint8x16_t bit_to_16(uint8x16_t h) {
    uint8x16_t v;
    if constexpr (B < 4) {
      v = vshlq_n_u8(h, 4 - B);
    } else if constexpr (B == 4) {
      v = h;
    } else {
      v = vshrq_n_u8(h, B - 4);
    }
    return vandq_u8(v, vdupq_n_u8(0x10));
  }

  // s + sub-blocks 2M and 2M + 1 (elements 64M .. 64M + 63) of one row
  // against one token, each times its scale (sc0: sub-blocks 0..3, sc1: 4..7).
  template <int M>
  static inline __attribute__((always_inline)) int32x4_t pair(int32x4_t s, const int8x16_t (&w)[4],
                                                              const int8x16_t (&x)[4], int32x4_t sc0,
                                                              int32x4_t sc1) {
    const int32x4_t z = vdupq_n_s32(0);
    const int32x4_t lo = vdotq_s32(vdotq_s32(z, w[0], x[0]), w[1], x[1]);
    const int32x4_t hi = vdotq_s32(vdotq_s32(z, w[2], x[2]), w[3], x[3]);
    const int32x4_t sc = M < 2 ? sc0 : sc1;
    s = vmlaq_laneq_s32(s, lo, sc, (2 * M) % 4);
    return vmlaq_laneq_s32(s, hi, sc, (2 * M + 1) % 4);
  }

  template <int R, int T, int M>
  static inline __attribute__((always_inline)) void step(const RowPtrs<WB, R>& w, const TokPtrs<BlockQ8_K, T>& x,
                                                         int64_t sb, const int32x4_t (&sc)[R][2],
                                                         int32x4_t (&isum)[R][T]) {
    int8x16_t xv[T][4];
#pragma GCC unroll 4
    for (int j = 0; j < T; ++j) {
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) xv[j][k] = load_s8(x.p[j][sb].qs + 64 * M + 16 * k);
    }
    const uint8x16_t m4 = vdupq_n_u8(0x0f);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const WB& b = w.p[i][sb];
      const uint8x16_t q0 = load_u8(b.qs + 32 * M), q1 = load_u8(b.qs + 32 * M + 16);
      uint8x16_t v[4] = {vandq_u8(q0, m4), vandq_u8(q1, m4), vshrq_n_u8(q0, 4), vshrq_n_u8(q1, 4)};
      if constexpr (kFifth) {
        const uint8x16_t h0 = load_u8(b.qh), h1 = load_u8(b.qh + 16);
        v[0] = vorrq_u8(v[0], bit_to_16<2 * M>(h0));
        v[1] = vorrq_u8(v[1], bit_to_16<2 * M>(h1));
        v[2] = vorrq_u8(v[2], bit_to_16<2 * M + 1>(h0));
        v[3] = vorrq_u8(v[3], bit_to_16<2 * M + 1>(h1));
      }
      const int8x16_t wv[4] = {as_s8(v[0]), as_s8(v[1]), as_s8(v[2]), as_s8(v[3])};
#pragma GCC unroll 4
      for (int j = 0; j < T; ++j) isum[i][j] = pair<M>(isum[i][j], wv, xv[j], sc[i][0], sc[i][1]);
    }
  }

  template <int R, int T>
  static void tile(const GemmArgs& a, int64_t r, int64_t t) {
    const RowPtrs<WB, R> w(a, r);
    const TokPtrs<BlockQ8_K, T> x(a, t);
    float32x4_t acc[R][T];
    zero_sums(acc);
    const int64_t nb = a.n / kQK_K;
    for (int64_t sb = 0; sb < nb; ++sb) {
      int16x8_t pairs[T];  // the activation's sums over each sub-block of 32
#pragma GCC unroll 4
      for (int j = 0; j < T; ++j) pairs[j] = vpaddq_s16(vld1q_s16(x.p[j][sb].bsums), vld1q_s16(x.p[j][sb].bsums + 8));
      int32x4_t sc[R][2];
      int32x4_t isum[R][T];
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const WB& b = w.p[i][sb];
        prefetch_weights(&b, R * w.stride, sizeof(WB));
        uint64_t sc8, mn8;
        unpack_q4k_scale_words(b.scales, &sc8, &mn8);
        const int16x8_t s16 = vreinterpretq_s16_u16(vmovl_u8(vcreate_u8(sc8)));
        const int16x8_t m16 = vreinterpretq_s16_u16(vmovl_u8(vcreate_u8(mn8)));
        sc[i][0] = vmovl_s16(vget_low_s16(s16));
        sc[i][1] = vmovl_high_s16(s16);
        const float dmin = half_to_float(b.dmin);
#pragma GCC unroll 4
        for (int j = 0; j < T; ++j) {
          const int32x4_t mins = vmlal_high_s16(vmull_s16(vget_low_s16(m16), vget_low_s16(pairs[j])), m16, pairs[j]);
          acc[i][j] = vfmsq_n_f32(acc[i][j], vcvtq_f32_s32(mins), dmin * x.p[j][sb].d);
          isum[i][j] = vdupq_n_s32(0);
        }
      }
      step<R, T, 0>(w, x, sb, sc, isum);
      step<R, T, 1>(w, x, sb, sc, isum);
      step<R, T, 2>(w, x, sb, sc, isum);
      step<R, T, 3>(w, x, sb, sc, isum);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const float d = half_to_float(w.p[i][sb].d);
#pragma GCC unroll 4
        for (int j = 0; j < T; ++j) acc[i][j] = vfmaq_n_f32(acc[i][j], vcvtq_f32_s32(isum[i][j]), d * x.p[j][sb].d);
      }
    }
    store_sums(a, r, t, acc);
  }
};

}  // namespace

void register_kquants_neon(Backend& be) {
  be.gemm[static_cast<int>(DType::Q2_K)] = run_tiles<GroupKernel<Q2KGroups>>;
  be.gemm[static_cast<int>(DType::Q3_K)] = run_tiles<GroupKernel<Q3KGroups>>;
  be.gemm[static_cast<int>(DType::Q4_K)] = run_tiles<Q45KKernel<BlockQ4_K>>;
  be.gemm[static_cast<int>(DType::Q5_K)] = run_tiles<Q45KKernel<BlockQ5_K>>;
  be.gemm[static_cast<int>(DType::Q6_K)] = run_tiles<GroupKernel<Q6KGroups>>;
}

}  // namespace edgelm::kernels
