// NEON gemm over the interleaved layout for CPUs with the int8 matrix
// multiply extension (FEAT_I8MM: Cortex-A510/A710/X2 and later, not
// RK3588's A76/A55): chosen by interleaved_neon.cpp only where HWCAP2_I8MM
// says the CPU has it, since this file is built with +i8mm.
//
// smmla multiplies a 2x8 matrix of signed bytes (two rows, eight consecutive
// elements each) by the transpose of another (two tokens' eight activation
// bytes): a 2x2 of int32 sums, lanes (row 0, token 0), (0, 1), (1, 0),
// (1, 1). So one smmla does 2 rows x 2 tokens x 8 elements, twice an sdot's
// work. The quarter's eight sdot operands (4 rows x 4 elements) become the
// eight smmla operands of its two row pairs by one zip each, once per block
// and used by every token pair; a token pair's block is four operands, one
// zip each. Per block, quarter and token pair: 8 smmla instead of 16 sdot.
//
// Decode (one token) and a sub-tile's odd token keep the dotprod kernels
// (interleaved_neon.h): smmla would waste half its lanes on them.
#include <arm_neon.h>

#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/interleaved_neon.h"

namespace edgelm::kernels {
namespace {

// Token pairs xr[2p], xr[2p + 1] for p < NP against quarter k of a group.
template <class F, int NP>
void quarter_pass_mm(const uint8_t* gp, int k, int64_t nb, const uint8_t* const* xr, float* y, int64_t ldy) {
  static_assert(!F::kHasMins, "Q8_0 activations, no minimums: Q4_1/Q5_1 take the sdot pass");
  float32x4_t acc[NP][2];  // token pair p, row pair i (rows 4k + 2i, 4k + 2i + 1)
#pragma GCC unroll 2
  for (int p = 0; p < NP; ++p) acc[p][0] = acc[p][1] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = gp + static_cast<size_t>(b) * F::kStep;
    if (k == 0) prefetch_block<F>(blk);
    int8x16_t q[8];
    F::load(blk, k, q);
    // w[i][g]: row pair i, elements 8g..8g+7 (q[2g] holds 8g.., q[2g + 1] 8g + 4..).
    int8x16_t w[2][4];
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const int32x4_t a = vreinterpretq_s32_s8(q[2 * g]), c = vreinterpretq_s32_s8(q[2 * g + 1]);
      w[0][g] = vreinterpretq_s8_s32(vzip1q_s32(a, c));
      w[1][g] = vreinterpretq_s8_s32(vzip2q_s32(a, c));
    }
    const float32x4_t dw = quarter_scales(blk, k);
    const float32x4_t dw_pair[2] = {vzip1q_f32(dw, dw), vzip2q_f32(dw, dw)};  // (w0 w0 w1 w1), (w2 w2 w3 w3)
#pragma GCC unroll 2
    for (int p = 0; p < NP; ++p) {
      const auto* x0 = reinterpret_cast<const BlockQ8_0*>(xr[2 * p]) + b;
      const auto* x1 = reinterpret_cast<const BlockQ8_0*>(xr[2 * p + 1]) + b;
      // t[g]: the two tokens' elements 8g..8g+7.
      const int64x2_t l0 = vreinterpretq_s64_s8(load_s8(x0->qs)), h0 = vreinterpretq_s64_s8(load_s8(x0->qs + 16));
      const int64x2_t l1 = vreinterpretq_s64_s8(load_s8(x1->qs)), h1 = vreinterpretq_s64_s8(load_s8(x1->qs + 16));
      const int8x16_t t[4] = {vreinterpretq_s8_s64(vzip1q_s64(l0, l1)), vreinterpretq_s8_s64(vzip2q_s64(l0, l1)),
                              vreinterpretq_s8_s64(vzip1q_s64(h0, h1)), vreinterpretq_s8_s64(vzip2q_s64(h0, h1))};
      const float d0 = half_to_float(x0->d), d1 = half_to_float(x1->d);
      const float32x4_t dx = {d0, d1, d0, d1};
      int32x4_t s0 = vdupq_n_s32(0);
      if constexpr (F::kOffset != 0) {
        const int32_t e0 = i16_start<F>(xr[2 * p], nb, b), e1 = i16_start<F>(xr[2 * p + 1], nb, b);
        s0 = int32x4_t{e0, e1, e0, e1};
      }
#pragma GCC unroll 2
      for (int i = 0; i < 2; ++i) {
        int32x4_t s = s0;
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) s = vmmlaq_s32(s, w[i][g], t[g]);
        acc[p][i] = vfmaq_f32(acc[p][i], vcvtq_f32_s32(s), vmulq_f32(dw_pair[i], dx));
      }
    }
  }
  // acc[p][i] lanes (2i, t0) (2i, t1) (2i + 1, t0) (2i + 1, t1): even lanes are
  // token 2p's four rows, odd lanes token 2p + 1's.
#pragma GCC unroll 2
  for (int p = 0; p < NP; ++p) {
    vst1q_f32(y + (2 * p) * ldy + 4 * k, vuzp1q_f32(acc[p][0], acc[p][1]));
    vst1q_f32(y + (2 * p + 1) * ldy + 4 * k, vuzp2q_f32(acc[p][0], acc[p][1]));
  }
}

// Prompt sub-tiles: token pairs by smmla, an odd last token by sdot.
struct MmlaPass {
  template <class F, int TS>
  static void run(const uint8_t* gp, int k, int64_t nb, const uint8_t* const* xr, float* y, int64_t ldy) {
    if constexpr (TS >= 2) quarter_pass_mm<F, TS / 2>(gp, k, nb, xr, y, ldy);
    if constexpr (TS % 2 == 1) quarter_pass<F, 1>(gp, k, nb, xr + TS - 1, y + (TS - 1) * ldy, ldy);
  }
};

}  // namespace

void register_interleaved_i8mm(Backend& be) {
  be.gemm_i16[static_cast<int>(DType::Q4_0)] = gemm_i16<MmlaPass, Q4_0Quarter>;
  be.gemm_i16[static_cast<int>(DType::Q8_0)] = gemm_i16<MmlaPass, Q8_0Quarter>;
  be.gemm_i16[static_cast<int>(DType::Q5_0)] = gemm_i16<MmlaPass, Q5_0Quarter>;
}

}  // namespace edgelm::kernels
