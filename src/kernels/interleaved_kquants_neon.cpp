// NEON (dotprod) gemm for Q4_K, Q5_K and Q6_K in the interleaved layout
// (pack_kquants.cpp has the bytes; it is the x86 one, read 16 bytes at a
// time): 16 bytes of a 64-byte quant chunk are rows 4k..4k+3 of the group
// (quarter k), four consecutive elements each, which is what
// vdotq_laneq_s32 takes, as for Q4_0 (interleaved_neon.cpp). So a quarter's
// sub-block of 32 (Q4_K, Q5_K) is eight sdot by lane against the token's two
// activation vectors, a sub-block of 16 (Q6_K) four against one, with no
// per-row reduction; the sub-block's int32 lanes (one per row) are added
// times the rows' scales of that sub-block (one byte per row, unpacked at
// load) by one multiply-add.
//
// Quants stay unsigned. Q4_K/Q5_K's minimums meet the activation's sums over
// each sub-block (bsums in pairs) once per super-block and go into the float
// sum with dmin; Q6_K's offset of 32 is taken off the integer sum likewise,
// 32 x sum_j sc_j x bsum_j.
//
// Cost per quarter (4 rows) and 32 weights, Q4_K decode: one load, an AND
// and a shift, two sdot, a quarter of a multiply-add, plus the scales (a
// load and widening per sub-block for all 16 rows), minimums (seven
// operations per sub-block for 16 rows) and one conversion and two
// multiply-adds per quarter and super-block. The row kernel
// (kquants_neon.cpp) spends about twice that.
//
// Decode takes all 16 rows of a group per pass; prompts a quarter at a time
// for up to four tokens, in interleaved_neon.h's group_tile as the
// 32-element formats.
#include <arm_neon.h>

#include <cstring>

#include "kernels/backend.h"
#include "kernels/interleaved_neon.h"

namespace edgelm::kernels {
namespace {

// Four bytes at p (one per row of a quarter) as int16 lanes.
template <bool kSigned>
inline int16x4_t bytes4_s16(const uint8_t* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  const uint8x8_t v = vreinterpret_u8_u32(vdup_n_u32(w));
  if constexpr (kSigned) return vget_low_s16(vmovl_s8(vreinterpret_s8_u8(v)));
  return vreinterpret_s16_u16(vget_low_u16(vmovl_u8(v)));
}
// The same four values widened to int32 (0..255 and -128..127 are both
// exact as int16, so a signed widening serves either).
template <bool kSigned>
inline int32x4_t bytes4(const uint8_t* p) {
  return vmovl_s16(bytes4_s16<kSigned>(p));
}

// Q4_K and Q5_K: 8 sub-blocks of 32; q[c] meets activation bytes 4c.. of
// the sub-block (lane c of its first 16), q[4 + c] bytes 16 + 4c...
template <bool kFifthBit>
struct Q45KQ : Q45KLayout<kFifthBit> {
  using L = Q45KLayout<kFifthBit>;
  static constexpr bool kSignedScales = false;
  static constexpr int kOffset = 0;
  static inline __attribute__((always_inline)) void load(const uint8_t* sb, int j, int k, int8x16_t (&q)[8]) {
    const uint8_t* p = sb + L::kQuants + L::kSubBytes * j + 16 * k;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    uint8x16_t v[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) v[c] = load_u8(p + 64 * c);
    if constexpr (kFifthBit) {
      // Bit c of a qh byte is bit 4 of the low nibble of chunk c, bit 4 + c
      // of its high nibble.
      const uint8x16_t qh = load_u8(p + 256), m5 = vdupq_n_u8(0x1F);
      q[0] = as_s8(vandq_u8(vbslq_u8(m4, v[0], vshlq_n_u8(qh, 4)), m5));
      q[1] = as_s8(vandq_u8(vbslq_u8(m4, v[1], vshlq_n_u8(qh, 3)), m5));
      q[2] = as_s8(vandq_u8(vbslq_u8(m4, v[2], vshlq_n_u8(qh, 2)), m5));
      q[3] = as_s8(vandq_u8(vbslq_u8(m4, v[3], vshlq_n_u8(qh, 1)), m5));
      q[4] = as_s8(vandq_u8(vsriq_n_u8(qh, v[0], 4), m5));
      q[5] = as_s8(vandq_u8(vsriq_n_u8(vshrq_n_u8(qh, 1), v[1], 4), m5));
      q[6] = as_s8(vandq_u8(vsriq_n_u8(vshrq_n_u8(qh, 2), v[2], 4), m5));
      q[7] = as_s8(vandq_u8(vsriq_n_u8(vshrq_n_u8(qh, 3), v[3], 4), m5));
    } else {
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        q[c] = as_s8(vandq_u8(v[c], m4));
        q[c + 4] = as_s8(vshrq_n_u8(v[c], 4));
      }
    }
  }
  // s + the quarter's dot products with sub-block j of the token.
  static inline __attribute__((always_inline)) int32x4_t dot(int32x4_t s, const int8x16_t (&q)[8], const int8_t* xqs,
                                                             int j) {
    return dot8(s, q, load_s8(xqs + 32 * j), load_s8(xqs + 32 * j + 16));
  }
  // The per-sub-block activation sums the minimums meet: pairs of bsums.
  static inline __attribute__((always_inline)) void sums(const BlockQ8_K& x, int16_t (&s)[16]) {
    vst1q_s16(s, vpaddq_s16(vld1q_s16(x.bsums), vld1q_s16(x.bsums + 8)));
  }
};

// Q6_K: 16 sub-blocks of 16; q[c] meets activation bytes 4c.. of the
// sub-block: low nibbles of the first vector (c = 0) and of the second
// (c = 1), high nibbles (c = 2, 3), top two bits from bits 2c, 2c + 1 of the
// third, as kquants_neon.cpp's Q6KGroups.
struct Q6KQ : Q6KLayout {
  static constexpr bool kSignedScales = true;
  static constexpr int kOffset = 32;
  static constexpr size_t kMinsAt = 0;  // none
  static inline __attribute__((always_inline)) void load(const uint8_t* sb, int j, int k, int8x16_t (&q)[4]) {
    const uint8_t* p = sb + kQuants + kSubBytes * j + 16 * k;
    const uint8x16_t ql0 = load_u8(p), ql1 = load_u8(p + 64);
    const uint8x16_t qh = load_u8(p + 128), qh2 = vshrq_n_u8(qh, 2);
    const uint8x16_t m6 = vdupq_n_u8(0x3f);
    q[0] = as_s8(vandq_u8(vsliq_n_u8(ql0, qh, 4), m6));
    q[1] = as_s8(vandq_u8(vsliq_n_u8(ql1, qh2, 4), m6));
    q[2] = as_s8(vsriq_n_u8(vandq_u8(qh, vdupq_n_u8(0x30)), ql0, 4));
    q[3] = as_s8(vsriq_n_u8(qh2, ql1, 4));
  }
  static inline __attribute__((always_inline)) int32x4_t dot(int32x4_t s, const int8x16_t (&q)[4], const int8_t* xqs,
                                                             int j) {
    const int8x16_t x = load_s8(xqs + 16 * j);
    s = vdotq_laneq_s32(s, q[0], x, 0);
    s = vdotq_laneq_s32(s, q[1], x, 1);
    s = vdotq_laneq_s32(s, q[2], x, 2);
    return vdotq_laneq_s32(s, q[3], x, 3);
  }
  static inline __attribute__((always_inline)) void sums(const BlockQ8_K& x, int16_t (&s)[16]) {
    vst1q_s16(s, vld1q_s16(x.bsums));
    vst1q_s16(s + 8, vld1q_s16(x.bsums + 8));
  }
};

// The f16 values of rows 4k..4k+3 at p (d at 0, dmin at 32).
inline float32x4_t halves4(const uint8_t* p, int k) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p + 8 * k))));
}

// One super-block's sums of a quarter for one token into acc: isum is
// sum_j sc_j (q_j . x_j), msum sum_j m_j s_j (Q4_K/Q5_K: the minimums times
// the sub-block sums; Q6_K: the scales times the bsums, for the offset).
template <class F>
inline __attribute__((always_inline)) float32x4_t finish(float32x4_t acc, const uint8_t* sb, int k, int32x4_t isum,
                                                         int32x4_t msum, float dx) {
  if constexpr (F::kOffset != 0) {
    isum = vmlsq_n_s32(isum, msum, F::kOffset);
    return vfmaq_f32(acc, vcvtq_f32_s32(isum), vmulq_n_f32(halves4(sb, k), dx));
  } else {
    acc = vfmaq_f32(acc, vcvtq_f32_s32(isum), vmulq_n_f32(halves4(sb, k), dx));
    return vfmsq_f32(acc, vcvtq_f32_s32(msum), vmulq_n_f32(halves4(sb + 32, k), dx));
  }
}

// Where the per-row byte that meets the sums (minimum or, for Q6_K, scale) of sub-block j is.
template <class F>
constexpr size_t weight_of_sums() {
  return F::kOffset != 0 ? F::kScales : F::kMinsAt;
}

inline void prefetch_super_block(const uint8_t* sb, size_t bytes) {
  for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(sb + bytes + off, 0, 3);
}

// Decode: one token against all 16 rows of a group.
template <class F>
void decode_kgroup(const uint8_t* gp, int64_t nb, const BlockQ8_K* x, float* y) {
  float32x4_t acc[4];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) acc[k] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* sb = gp + static_cast<size_t>(b) * F::kBytes;
    prefetch_super_block(sb, F::kBytes);
    int16_t s[16];
    F::sums(x[b], s);
    int32x4_t isum[4], msum[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) isum[k] = msum[k] = vdupq_n_s32(0);
    for (int j = 0; j < F::kSubs; ++j) {
      // The 16 rows' scales and sum weights of sub-block j, widened once.
      const uint8x16_t sc8 = load_u8(sb + F::kScales + 16 * j);
      const uint8x16_t mw8 = load_u8(sb + weight_of_sums<F>() + 16 * j);
      int16x8_t sc16[2], mw16[2];
      if constexpr (F::kSignedScales) {
        sc16[0] = vmovl_s8(vget_low_s8(as_s8(sc8)));
        sc16[1] = vmovl_high_s8(as_s8(sc8));
        mw16[0] = sc16[0];
        mw16[1] = sc16[1];
      } else {
        sc16[0] = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(sc8)));
        sc16[1] = vreinterpretq_s16_u16(vmovl_high_u8(sc8));
        mw16[0] = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mw8)));
        mw16[1] = vreinterpretq_s16_u16(vmovl_high_u8(mw8));
      }
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        int8x16_t q[F::kVecs];
        F::load(sb, j, k, q);
        const int32x4_t d = F::dot(vdupq_n_s32(0), q, x[b].qs, j);
        const int16x4_t sc = k % 2 ? vget_high_s16(sc16[k / 2]) : vget_low_s16(sc16[k / 2]);
        const int16x4_t mw = k % 2 ? vget_high_s16(mw16[k / 2]) : vget_low_s16(mw16[k / 2]);
        isum[k] = vmlaq_s32(isum[k], d, vmovl_s16(sc));
        msum[k] = vmlal_n_s16(msum[k], mw, s[j]);
      }
    }
    const float dx = x[b].d;
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) acc[k] = finish<F>(acc[k], sb, k, isum[k], msum[k], dx);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) vst1q_f32(y + 4 * k, acc[k]);
}

// Prompt: TS tokens against quarter k of a group, the outputs of token t
// stored at y[t * ldy + 4k ..].
template <class F, int TS>
void kquarter_pass(const uint8_t* gp, int k, int64_t nb, const BlockQ8_K* const* xr, float* y, int64_t ldy) {
  float32x4_t acc[TS];
#pragma GCC unroll 4
  for (int t = 0; t < TS; ++t) acc[t] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* sb = gp + static_cast<size_t>(b) * F::kBytes;
    if (k == 0) prefetch_super_block(sb, F::kBytes);  // the first of a group's four passes
    int16_t s[TS][16];
    int32x4_t isum[TS], msum[TS];
#pragma GCC unroll 4
    for (int t = 0; t < TS; ++t) {
      F::sums(xr[t][b], s[t]);
      isum[t] = msum[t] = vdupq_n_s32(0);
    }
    for (int j = 0; j < F::kSubs; ++j) {
      const int32x4_t sc = bytes4<F::kSignedScales>(sb + F::kScales + 16 * j + 4 * k);
      const int16x4_t mw = bytes4_s16<F::kSignedScales>(sb + weight_of_sums<F>() + 16 * j + 4 * k);
      int8x16_t q[F::kVecs];
      F::load(sb, j, k, q);
#pragma GCC unroll 4
      for (int t = 0; t < TS; ++t) {
        isum[t] = vmlaq_s32(isum[t], F::dot(vdupq_n_s32(0), q, xr[t][b].qs, j), sc);
        msum[t] = vmlal_n_s16(msum[t], mw, s[t][j]);
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < TS; ++t) acc[t] = finish<F>(acc[t], sb, k, isum[t], msum[t], xr[t][b].d);
  }
#pragma GCC unroll 4
  for (int t = 0; t < TS; ++t) vst1q_f32(y + t * ldy + 4 * k, acc[t]);
}

// group_tile's passes (interleaved_neon.h) for the K formats.
struct KDecode {
  template <class F, int G>
  static void run(const uint8_t* gp, int64_t nb, const uint8_t* xr, float* y) {
    static_assert(G == 1, "the K formats' groups are not paired");
    decode_kgroup<F>(gp, nb, reinterpret_cast<const BlockQ8_K*>(xr), y);
  }
};
struct KPass {
  template <class F, int TS>
  static void run(const uint8_t* gp, int k, int64_t nb, const uint8_t* const* xr, float* y, int64_t ldy) {
    const BlockQ8_K* xk[TS];
    for (int t = 0; t < TS; ++t) xk[t] = reinterpret_cast<const BlockQ8_K*>(xr[t]);
    kquarter_pass<F, TS>(gp, k, nb, xk, y, ldy);
  }
};

}  // namespace

void register_interleaved_kquants_neon(Backend& be) {
  be.gemm_i16[static_cast<int>(DType::Q4_K)] = gemm_i16<KPass, Q45KQ<false>, KDecode>;
  be.gemm_i16[static_cast<int>(DType::Q5_K)] = gemm_i16<KPass, Q45KQ<true>, KDecode>;
  be.gemm_i16[static_cast<int>(DType::Q6_K)] = gemm_i16<KPass, Q6KQ, KDecode>;
}

}  // namespace edgelm::kernels
