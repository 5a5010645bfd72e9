// NEON (armv8.2-a, dotprod, fp16) gemm for float weights and the 32-element
// formats, and the backend table of this ISA. K formats: kquants_neon.cpp;
// the interleaved layout (Q4_0, Q8_0): interleaved_neon.cpp; activation
// quantizers and KV helpers: act_neon.cpp.
//
// sdot multiplies signed bytes, so every 32-element format is decoded into
// its signed values directly (Q4_0: q - 8, Q5_0: q - 16, Q4_1/Q5_1: q, which
// fits int8): a block is two int8x16 registers, two sdot give its dot product
// in 4 int32 lanes, converted and scaled by d_w * d_x. The affine formats'
// m * s term is one scalar per block, summed separately.

#include <arm_neon.h>

#include <cstring>

#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/float_rows.h"
#include "kernels/simd_neon.h"
#include "kernels/tile_driver.h"

namespace edgelm::kernels {
namespace {

using namespace neon;

// ---- 32-element formats ---------------------------------------------------------------

// A block's 32 signed values: elements 0-15 and 16-31.
struct Vals {
  int8x16_t lo, hi;
};

inline Vals nibbles(const uint8_t* qs) {
  const uint8x16_t q = load_u8(qs);
  return {as_s8(vandq_u8(q, vdupq_n_u8(0x0f))), as_s8(vshrq_n_u8(q, 4))};
}

// The fifth bits of the 32-bit qh field as byte masks (bit j -> 0xff in
// element j): the field splat into a register, each byte spread over eight
// lanes by a table lookup, then tested against one bit per lane.
struct HighMasks {
  uint8x16_t lo, hi;
};
inline HighMasks high_masks(const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  static constexpr uint8_t kSpreadLo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
  static constexpr uint8_t kSpreadHi[16] = {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
  const uint8x16_t bytes = vreinterpretq_u8_u32(vdupq_n_u32(h));
  const uint8x16_t bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ull));
  return {vtstq_u8(vqtbl1q_u8(bytes, vld1q_u8(kSpreadLo)), bit),
          vtstq_u8(vqtbl1q_u8(bytes, vld1q_u8(kSpreadHi)), bit)};
}

// Q5_1's values, 0..31: the nibble with 16 added where the fifth bit is set.
inline Vals five_bits(const uint8_t* qs, const uint8_t* qh) {
  const Vals v = nibbles(qs);
  const HighMasks m = high_masks(qh);
  const uint8x16_t b16 = vdupq_n_u8(0x10);
  return {vorrq_s8(v.lo, as_s8(vandq_u8(m.lo, b16))), vorrq_s8(v.hi, as_s8(vandq_u8(m.hi, b16)))};
}

// Q5_0's values, q - 16 in -16..15: where the fifth bit is clear the value
// is the nibble minus 16, which as a signed byte is the nibble with its top
// four bits set; where it is set, the nibble itself.
inline Vals five_bits_centered(const uint8_t* qs, const uint8_t* qh) {
  const Vals v = nibbles(qs);
  const HighMasks m = high_masks(qh);
  const uint8x16_t top = vdupq_n_u8(0xf0);
  return {vorrq_s8(v.lo, as_s8(vbicq_u8(top, m.lo))), vorrq_s8(v.hi, as_s8(vbicq_u8(top, m.hi)))};
}

inline Vals minus(Vals v, int8_t off) {
  return {vsubq_s8(v.lo, vdupq_n_s8(off)), vsubq_s8(v.hi, vdupq_n_s8(off))};
}

struct Q4_0Fmt {
  using WB = BlockQ4_0;
  using XB = BlockQ8_0;
  static constexpr bool kAffine = false;
  static Vals values(const WB& b) { return minus(nibbles(b.qs), 8); }
};
struct Q5_0Fmt {
  using WB = BlockQ5_0;
  using XB = BlockQ8_0;
  static constexpr bool kAffine = false;
  static Vals values(const WB& b) { return five_bits_centered(b.qs, b.qh); }
};
struct Q8_0Fmt {
  using WB = BlockQ8_0;
  using XB = BlockQ8_0;
  static constexpr bool kAffine = false;
  static Vals values(const WB& b) { return {load_s8(b.qs), load_s8(b.qs + 16)}; }
};
struct Q4_1Fmt {
  using WB = BlockQ4_1;
  using XB = BlockQ8_1;
  static constexpr bool kAffine = true;
  static Vals values(const WB& b) { return nibbles(b.qs); }
};
struct Q5_1Fmt {
  using WB = BlockQ5_1;
  using XB = BlockQ8_1;
  static constexpr bool kAffine = true;
  static Vals values(const WB& b) { return five_bits(b.qs, b.qh); }
};

template <class F>
struct LegacyKernel {
  using WB = typename F::WB;
  using XB = typename F::XB;
  static constexpr int kRows = 4, kToks = 4;
  static constexpr int kDecodeRows = 4;

  template <int R, int T>
  static void tile(const GemmArgs& a, int64_t r, int64_t t) {
    const RowPtrs<WB, R> w(a, r);
    const TokPtrs<XB, T> x(a, t);
    float32x4_t acc[R][T];
    float mins[R][T] = {};
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) acc[i][j] = vdupq_n_f32(0.0f);
    const int64_t nb = a.n / kQK;
    for (int64_t b = 0; b < nb; ++b) {
      Vals xv[T];
      float xd[T];
      for (int j = 0; j < T; ++j) {
        xv[j] = {load_s8(x.p[j][b].qs), load_s8(x.p[j][b].qs + 16)};
        xd[j] = half_to_float(x.p[j][b].d);
      }
      for (int i = 0; i < R; ++i) {
        const WB& wb = w.p[i][b];
        prefetch_weights(&wb, R * w.stride, 1);
        const Vals v = F::values(wb);
        const float wd = half_to_float(wb.d);
        for (int j = 0; j < T; ++j) {
          const int32x4_t dot =
              vdotq_s32(vdotq_s32(vdupq_n_s32(0), v.lo, xv[j].lo), v.hi, xv[j].hi);
          acc[i][j] = vfmaq_n_f32(acc[i][j], vcvtq_f32_s32(dot), wd * xd[j]);
          if constexpr (F::kAffine) mins[i][j] += half_to_float(wb.m) * half_to_float(x.p[j][b].s);
        }
      }
    }
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) a.y[(t + j) * a.ldy + r + i] = vaddvq_f32(acc[i][j]) + mins[i][j];
  }
};

Backend make_backend() {
  Backend be;
  auto set = [&](DType t, GemmFn f) { be.gemm[static_cast<int>(t)] = f; };
  // Float weights: float_rows.h's tile, 4 rows x 4 tokens.
  set(DType::F32, run_tiles<FloatKernel<LoadF32<F32x4>, 4, 4>>);
  set(DType::F16, run_tiles<FloatKernel<LoadF16<F32x4>, 4, 4>>);
  set(DType::BF16, run_tiles<FloatKernel<LoadBF16<F32x4>, 4, 4>>);
  set(DType::Q4_0, run_tiles<LegacyKernel<Q4_0Fmt>>);
  set(DType::Q4_1, run_tiles<LegacyKernel<Q4_1Fmt>>);
  set(DType::Q5_0, run_tiles<LegacyKernel<Q5_0Fmt>>);
  set(DType::Q5_1, run_tiles<LegacyKernel<Q5_1Fmt>>);
  set(DType::Q8_0, run_tiles<LegacyKernel<Q8_0Fmt>>);
  register_kquants_neon(be);
  register_interleaved_neon(be);
  register_act_neon(be);
  register_attn_neon(be);
  return be;
}

}  // namespace

const Backend& neon_backend() {
  static const Backend be = make_backend();
  return be;
}

}  // namespace edgelm::kernels
