// NEON (dotprod) gemm for the K formats (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)
// against Q8_K activations.
//
// Q2_K and Q3_K share a generic kernel (KKernel): a super-block is walked in
// groups of 16 elements (one int8x16). Each group of a row is decoded once
// into signed values (Q3_K: q - 4, Q2_K its unsigned quants) and sdot'ed with
// the group of every token of the tile; the int32 lanes are multiplied by
// the group's scale and summed over the super-block, then converted once and
// scaled by d_w * d_x. Q2_K's mins are applied through the activation's
// bsums in a scalar per (row, token). Q6_K (Q6KKernel) and Q4_K/Q5_K
// (Q45KKernel) have kernels of their own, below.

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

// Per-row state of one super-block: scales per group of 16, and mins (for
// formats that have them).
struct KRow {
  int32_t sc[16];
  int16x8_t mins[2];  // Q2_K: 16 mins
  float d, dmin;
};

inline uint8x16_t shr(uint8x16_t v, int n) {
  return vshlq_u8(v, vdupq_n_s8(static_cast<int8_t>(-n)));
}
inline uint8x16_t bit_set(uint8x16_t m, int bit) {
  return vtstq_u8(m, vdupq_n_u8(static_cast<uint8_t>(1u << bit)));
}

struct Q2KFmt {
  using WB = BlockQ2_K;
  static constexpr int kGroupsPerScale = 1;
  static constexpr bool kMins = true;
  static void prepare(const WB& b, KRow* s) {
    for (int j = 0; j < 16; ++j) s->sc[j] = b.scales[j] & 0xf;
    const uint8x16_t raw = load_u8(b.scales);
    const uint8x16_t m = vshrq_n_u8(raw, 4);
    s->mins[0] = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(m)));
    s->mins[1] = vreinterpretq_s16_u16(vmovl_u8(vget_high_u8(m)));
    s->d = half_to_float(b.d);
    s->dmin = half_to_float(b.dmin);
  }
  // Group g = elements 16g..16g+15 = 128h + 32k + l0 + (0..15): bits 2k of
  // qs[32h + l0 ..].
  static int8x16_t group(const WB& b, int g) {
    const int h = g >> 3, k = (g >> 1) & 3, l0 = 16 * (g & 1);
    return as_s8(vandq_u8(shr(load_u8(b.qs + 32 * h + l0), 2 * k), vdupq_n_u8(3)));
  }
};

struct Q3KFmt {
  using WB = BlockQ3_K;
  static constexpr int kGroupsPerScale = 1;
  static constexpr bool kMins = false;
  static void prepare(const WB& b, KRow* s) {
    int8_t sc[16];
    unpack_q3k_scales(b.scales, sc);
    for (int j = 0; j < 16; ++j) s->sc[j] = sc[j];
    s->d = half_to_float(b.d);
    s->dmin = 0.0f;
  }
  // Low bits as Q2_K; the value is low - 4 unless bit 4h + k of hmask is set.
  static int8x16_t group(const WB& b, int g) {
    const int h = g >> 3, k = (g >> 1) & 3, l0 = 16 * (g & 1);
    const uint8x16_t low = vandq_u8(shr(load_u8(b.qs + 32 * h + l0), 2 * k), vdupq_n_u8(3));
    const uint8x16_t minus4 = vbicq_u8(vdupq_n_u8(4), bit_set(load_u8(b.hmask + l0), 4 * h + k));
    return vsubq_s8(as_s8(low), as_s8(minus4));
  }
};

// sum_j mins_j * bsum_j over the 16 bsums (Q2_K).
template <class F>
inline int32_t min_dot(const KRow& s, const BlockQ8_K& x) {
  static_assert(F::kGroupsPerScale == 1);
  const int16x8_t b0 = vld1q_s16(x.bsums), b1 = vld1q_s16(x.bsums + 8);
  int32x4_t acc = vmull_s16(vget_low_s16(s.mins[0]), vget_low_s16(b0));
  acc = vmlal_s16(acc, vget_high_s16(s.mins[0]), vget_high_s16(b0));
  acc = vmlal_s16(acc, vget_low_s16(s.mins[1]), vget_low_s16(b1));
  acc = vmlal_s16(acc, vget_high_s16(s.mins[1]), vget_high_s16(b1));
  return vaddvq_s32(acc);
}

template <class F>
struct KKernel {
  using WB = typename F::WB;
  static constexpr int kRows = 4, kToks = 2;
  static constexpr int kDecodeRows = 4;
  static constexpr int kG = F::kGroupsPerScale;

  template <int R, int T>
  static void tile(const GemmArgs& a, int64_t r, int64_t t) {
    const RowPtrs<WB, R> w(a, r);
    const TokPtrs<BlockQ8_K, T> x(a, t);
    float32x4_t acc[R][T];
    float mins[R][T] = {};
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) acc[i][j] = vdupq_n_f32(0.0f);

    const int64_t nb = a.n / kQK_K;
    for (int64_t sb = 0; sb < nb; ++sb) {
      KRow s[R];
      for (int i = 0; i < R; ++i) {
        prefetch_weights(&w.p[i][sb], R * w.stride, sizeof(WB));
        F::prepare(w.p[i][sb], &s[i]);
      }
      int32x4_t isum[R][T];
      for (int i = 0; i < R; ++i)
        for (int j = 0; j < T; ++j) isum[i][j] = vdupq_n_s32(0);
#pragma GCC unroll 16
      for (int u = 0; u < 16 / kG; ++u) {  // scale units
        int8x16_t xv[T][kG];
        for (int j = 0; j < T; ++j)
          for (int g = 0; g < kG; ++g) xv[j][g] = load_s8(x.p[j][sb].qs + 16 * (kG * u + g));
        for (int i = 0; i < R; ++i) {
          int8x16_t wv[kG];
          for (int g = 0; g < kG; ++g) wv[g] = F::group(w.p[i][sb], kG * u + g);
          for (int j = 0; j < T; ++j) {
            int32x4_t dot = vdupq_n_s32(0);
            for (int g = 0; g < kG; ++g) dot = vdotq_s32(dot, wv[g], xv[j][g]);
            isum[i][j] = vmlaq_n_s32(isum[i][j], dot, s[i].sc[u]);
          }
        }
      }
      for (int i = 0; i < R; ++i) {
        for (int j = 0; j < T; ++j) {
          const float dx = x.p[j][sb].d;
          acc[i][j] = vfmaq_n_f32(acc[i][j], vcvtq_f32_s32(isum[i][j]), s[i].d * dx);
          if constexpr (F::kMins)
            mins[i][j] += s[i].dmin * dx * static_cast<float>(min_dot<F>(s[i], x.p[j][sb]));
        }
      }
    }
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) a.y[(t + j) * a.ldy + r + i] = vaddvq_f32(acc[i][j]) - mins[i][j];
  }
};


// The float sums of an R x T tile: zeroed, then each lane sum stored to its
// output (the K kernels with their own layout of the super-block, below).
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

// Q6_K has its own kernel: its quants are spread over two arrays (low
// nibbles in ql, the two high bits in qh), and building each group of 16 on
// its own (as Q3_K's above) costs a shift, a mask, a shift and an OR per
// group, plus the subtraction of 32. Here one 16-byte load of qh and two of
// ql give four groups at once (k = 0..3: elements 128h + 32k + l0 ..), each
// in one or two bit-field inserts (sli/sri), and the quants stay unsigned
// (0..63): the -32 is taken off once per super-block through the
// activation's bsums, sum_g sc_g (q_g - 32) . x_g = sum_g sc_g (q_g . x_g) -
// 32 sum_g sc_g bsum_g. Per row and 64 weights that leaves three loads,
// eight bit operations, four sdot and four multiply-adds by the group scale
// per row; the scales are widened to int32 once per half super-block.
//
// Bounds: a lane of one sdot is at most 4 x 63 x 127; times a scale (|s| <=
// 128) and over 16 groups, about 66 M; the correction lane at most 32 x 4 x
// 128 x 2032: both far inside int32.
struct Q6KKernel {
  using WB = BlockQ6_K;
  static constexpr int kRows = 2, kToks = 4;
  static constexpr int kDecodeRows = 2;

  // Groups k = 0..3 of super-block half h at byte offset l0 (0 or 16).
  static inline __attribute__((always_inline)) void groups(const WB& b, int h, int l0, int8x16_t (&w)[4]) {
    const uint8x16_t ql0 = load_u8(b.ql + 64 * h + l0), ql1 = load_u8(b.ql + 64 * h + 32 + l0);
    const uint8x16_t qh = load_u8(b.qh + 32 * h + l0), qh2 = vshrq_n_u8(qh, 2);
    const uint8x16_t m6 = vdupq_n_u8(0x3f);
    w[0] = as_s8(vandq_u8(vsliq_n_u8(ql0, qh, 4), m6));                  // ql0 & 15 | qh bits 0-1
    w[1] = as_s8(vandq_u8(vsliq_n_u8(ql1, qh2, 4), m6));                 // ql1 & 15 | qh bits 2-3
    w[2] = as_s8(vsriq_n_u8(vandq_u8(qh, vdupq_n_u8(0x30)), ql0, 4));  // ql0 >> 4 | qh bits 4-5
    w[3] = as_s8(vsriq_n_u8(qh2, ql1, 4));                              // ql1 >> 4 | qh bits 6-7
  }

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
  // row's eight scales of half H are loaded and widened here rather than
  // kept across quarters: registers are short (the rows' sums, the
  // activations, four groups and their temporaries).
  template <int R, int T, int H, int L>
  static inline __attribute__((always_inline)) void quarter(const RowPtrs<WB, R>& w, const TokPtrs<BlockQ8_K, T>& x,
                                                            int64_t sb, int32x4_t (&isum)[R][T]) {
    int8x16_t xv[T][4];
#pragma GCC unroll 4
    for (int j = 0; j < T; ++j) {
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) xv[j][k] = load_s8(x.p[j][sb].qs + 128 * H + 32 * k + 16 * L);
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const int16x8_t s16 = vmovl_s8(vld1_s8(w.p[i][sb].scales + 8 * H));
      const int32x4_t sc0 = vmovl_s16(vget_low_s16(s16)), sc1 = vmovl_high_s16(s16);
      int8x16_t wv[4];
      groups(w.p[i][sb], H, 16 * L, wv);
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
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        prefetch_weights(&w.p[i][sb], R * w.stride, sizeof(WB));
        const int8x16_t sc8 = load_s8(w.p[i][sb].scales);
        const int16x8_t s0 = vmovl_s8(vget_low_s8(sc8)), s1 = vmovl_high_s8(sc8);
#pragma GCC unroll 4
        for (int j = 0; j < T; ++j) {
          const int16x8_t b0 = vld1q_s16(x.p[j][sb].bsums), b1 = vld1q_s16(x.p[j][sb].bsums + 8);
          int32x4_t c = vmull_s16(vget_low_s16(s0), vget_low_s16(b0));
          c = vmlal_high_s16(c, s0, b0);
          c = vmlal_s16(c, vget_low_s16(s1), vget_low_s16(b1));
          c = vmlal_high_s16(c, s1, b1);
          isum[i][j] = vnegq_s32(vshlq_n_s32(c, 5));  // -32 sum_g sc_g bsum_g, spread over lanes
        }
      }
      quarter<R, T, 0, 0>(w, x, sb, isum);
      quarter<R, T, 0, 1>(w, x, sb, isum);
      quarter<R, T, 1, 0>(w, x, sb, isum);
      quarter<R, T, 1, 1>(w, x, sb, isum);
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


// Q4_K and Q5_K have their own kernel too, for the same reason as Q6_K: the
// generic one above keeps a row's scales in a KRow array, which GCC's -O3
// peels into scalars and spills (1.06 instructions a weight for Q5_K, 0.71
// for Q4_K, per decode call under qemu). Here a row's eight scales are two
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
  be.gemm[static_cast<int>(DType::Q2_K)] = run_tiles<KKernel<Q2KFmt>>;
  be.gemm[static_cast<int>(DType::Q3_K)] = run_tiles<KKernel<Q3KFmt>>;
  be.gemm[static_cast<int>(DType::Q4_K)] = run_tiles<Q45KKernel<BlockQ4_K>>;
  be.gemm[static_cast<int>(DType::Q5_K)] = run_tiles<Q45KKernel<BlockQ5_K>>;
  be.gemm[static_cast<int>(DType::Q6_K)] = run_tiles<Q6KKernel>;
}

}  // namespace edgelm::kernels
