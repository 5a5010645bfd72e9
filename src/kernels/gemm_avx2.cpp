// AVX2 (+FMA, F16C) gemm for float weights and the 32-element formats, and
// the backend table of this ISA. K formats: kquants_avx2.cpp; activation
// quantizers and KV helpers: act_avx2.cpp.
//
// One block of 32 quants fills one ymm. Without VNNI the byte products go
// through vpmaddubsw (u8 x s8 -> int16 pairs) and vpmaddwd with ones (->
// 8 x int32), then to float, scaled by d_w * d_x and accumulated; only the
// final accumulator is reduced. vpmaddubsw needs one unsigned operand: the
// symmetric formats (values -8..7, -16..15, -127..127) use |w| and x with
// w's sign moved onto it (vpsignb), which keeps every pair sum within int16
// (at most 2 * 128 * 127); the affine formats' quants are unsigned already.

#include <immintrin.h>

#include <cstring>

#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/float_rows.h"
#include "kernels/simd_avx2.h"
#include "kernels/tile_driver.h"

namespace edgelm::kernels {
namespace {

using namespace avx2;

// ---- 32-element formats ---------------------------------------------------------------

// 16 bytes of nibbles -> 32 unsigned bytes [low nibbles, high nibbles].
inline __m256i nibbles(const uint8_t* q) {
  const __m256i v = _mm256_broadcastsi128_si256(load128(q));
  return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_set_epi64x(4, 4, 0, 0)),
                          _mm256_set1_epi8(0x0f));
}

// 0x10 in byte j where bit j of the 32-bit qh field is set.
inline __m256i fifth_bits(const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  // Byte j takes source byte j / 8, then tests its bit j % 8.
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(h)),
                          _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                            0x0101010101010101, 0x0000000000000000));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// Per format: signed values (symmetric formats) or unsigned quants (affine).
struct Q4_0Fmt {
  using WB = BlockQ4_0;
  using XB = BlockQ8_0;
  static constexpr bool kAffine = false;
  static __m256i values(const WB& b) { return _mm256_sub_epi8(nibbles(b.qs), _mm256_set1_epi8(8)); }
};
struct Q5_0Fmt {
  using WB = BlockQ5_0;
  using XB = BlockQ8_0;
  static constexpr bool kAffine = false;
  static __m256i values(const WB& b) {
    return _mm256_sub_epi8(_mm256_or_si256(nibbles(b.qs), fifth_bits(b.qh)), _mm256_set1_epi8(16));
  }
};
struct Q8_0Fmt {
  using WB = BlockQ8_0;
  using XB = BlockQ8_0;
  static constexpr bool kAffine = false;
  static __m256i values(const WB& b) { return load256(b.qs); }
};
struct Q4_1Fmt {
  using WB = BlockQ4_1;
  using XB = BlockQ8_1;
  static constexpr bool kAffine = true;
  static __m256i values(const WB& b) { return nibbles(b.qs); }
};
struct Q5_1Fmt {
  using WB = BlockQ5_1;
  using XB = BlockQ8_1;
  static constexpr bool kAffine = true;
  static __m256i values(const WB& b) { return _mm256_or_si256(nibbles(b.qs), fifth_bits(b.qh)); }
};

template <class F>
struct LegacyKernel {
  using WB = typename F::WB;
  using XB = typename F::XB;
  static constexpr int kRows = 2, kToks = 2;
  static constexpr int kDecodeRows = 2;

  template <int R, int T>
  static void tile(const GemmArgs& a, int64_t r, int64_t t) {
    const RowPtrs<WB, R> w(a, r);
    const TokPtrs<XB, T> x(a, t);
    __m256 acc[R][T];
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) acc[i][j] = _mm256_setzero_ps();
    const int64_t nb = a.n / kQK;
    for (int64_t b = 0; b < nb; ++b) {
      __m256i xq[T];
      __m256 xd[T], xs[T];
      for (int j = 0; j < T; ++j) {
        const XB& xb = x.p[j][b];
        xq[j] = load256(xb.qs);
        xd[j] = _mm256_set1_ps(half_to_float(xb.d));
        // Affine: the block's min contributes m * s; each of the 8 lanes gets s/8.
        if constexpr (F::kAffine) xs[j] = _mm256_set1_ps(half_to_float(xb.s) * 0.125f);
      }
      for (int i = 0; i < R; ++i) {
        const WB& wb = w.p[i][b];
        prefetch_weights(&wb, R * w.stride, 1);
        const __m256i v = F::values(wb);
        const __m256 wd = _mm256_set1_ps(half_to_float(wb.d));
        if constexpr (F::kAffine) {
          const __m256 wm = _mm256_set1_ps(half_to_float(wb.m));
          for (int j = 0; j < T; ++j) {
            const __m256 dot = _mm256_cvtepi32_ps(dot_u8s8(v, xq[j]));
            acc[i][j] = _mm256_fmadd_ps(dot, _mm256_mul_ps(wd, xd[j]), acc[i][j]);
            acc[i][j] = _mm256_fmadd_ps(wm, xs[j], acc[i][j]);
          }
        } else {
          const __m256i av = _mm256_sign_epi8(v, v);  // |v|
          for (int j = 0; j < T; ++j) {
            const __m256 dot = _mm256_cvtepi32_ps(dot_u8s8(av, _mm256_sign_epi8(xq[j], v)));
            acc[i][j] = _mm256_fmadd_ps(dot, _mm256_mul_ps(wd, xd[j]), acc[i][j]);
          }
        }
      }
    }
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) a.y[(t + j) * a.ldy + r + i] = hsum(acc[i][j]);
  }
};

Backend make_backend() {
  Backend be;
  auto set = [&](DType t, GemmFn f) { be.gemm[static_cast<int>(t)] = f; };
  // Float weights: float_rows.h's tile, 2 rows x 4 tokens.
  set(DType::F32, run_tiles<FloatKernel<LoadF32<F32x8>, 2, 4>>);
  set(DType::F16, run_tiles<FloatKernel<LoadF16<F32x8>, 2, 4>>);
  set(DType::BF16, run_tiles<FloatKernel<LoadBF16<F32x8>, 2, 4>>);
  set(DType::Q4_0, run_tiles<LegacyKernel<Q4_0Fmt>>);
  set(DType::Q4_1, run_tiles<LegacyKernel<Q4_1Fmt>>);
  set(DType::Q5_0, run_tiles<LegacyKernel<Q5_0Fmt>>);
  set(DType::Q5_1, run_tiles<LegacyKernel<Q5_1Fmt>>);
  set(DType::Q8_0, run_tiles<LegacyKernel<Q8_0Fmt>>);
  register_kquants_avx2(be);
  register_act_avx2(be);
  register_attn_avx2(be);
  register_interleaved_avx2(be);
  return be;
}

}  // namespace

const Backend& avx2_backend() {
  static const Backend be = make_backend();
  return be;
}

}  // namespace edgelm::kernels
