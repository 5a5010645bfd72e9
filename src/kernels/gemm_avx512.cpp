// AVX-512 (F, BW, VL, DQ, VNNI) gemm for float weights and the 32-element
// formats, and the backend table of this ISA. K formats: kquants_avx512.cpp;
// activation quantizers and KV helpers: act_avx512.cpp.
//
// The 32-element formats all take the same shape here. Two consecutive
// blocks fill one zmm of 64 bytes: weights as unsigned bytes u (Q4_0: the
// nibble, Q5_0: the 5-bit value, Q8_0: q + 128), activations as signed bytes.
// vpdpbusd sums u * x four bytes per lane, so each 32-bit lane holds part of
// one block's dot product; the lanes are converted to float and multiplied by
// that block's d_w * d_x (lanes 0-7 block 0, lanes 8-15 block 1), and only
// the final accumulator is reduced. The symmetric formats store q + offset,
// so sum(q * x) = sum(u * x) - offset * sum(x): the per-lane offset * sum(x)
// depends only on the activation and is computed once per token and step,
// then used as the starting value of vpdpbusd for every row of the tile.

#include <immintrin.h>

#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/simd_avx512.h"
#include "kernels/tile_driver.h"

namespace edgelm::kernels {
namespace {

using namespace avx512;

// ---- float weights: y = sum(w * x) ---------------------------------------------

// 16 weights as f32, from each storage type; `m` masks a row tail.
struct LoadF32 {
  using W = float;
  static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 load(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};
struct LoadF16 {
  using W = uint16_t;
  static __m512 load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 load(const uint16_t* p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  }
};
struct LoadBF16 {
  using W = uint16_t;
  static __m512 widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static __m512 load(const uint16_t* p) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 load(const uint16_t* p, __mmask16 m) {
    return widen(_mm256_maskz_loadu_epi16(m, p));
  }
};

// R rows x T tokens, 16 elements per step; accumulators acc[R][T] of 16 lanes.
template <class L>
struct FloatKernel {
  static constexpr int kRows = 4, kToks = 4;
  static constexpr int kDecodeRows = 4;

  template <int R, int T>
  static void tile(const GemmArgs& a, int64_t r, int64_t t) {
    const RowPtrs<typename L::W, R> w(a, r);
    const TokPtrs<float, T> x(a, t);
    __m512 acc[R][T];
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) acc[i][j] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= a.n; k += 16) {
      __m512 xv[T];
      for (int j = 0; j < T; ++j) xv[j] = _mm512_loadu_ps(x.p[j] + k);
      for (int i = 0; i < R; ++i) {
        prefetch_weights(w.p[i] + k, R * w.stride, 1);
        const __m512 wv = L::load(w.p[i] + k);
        for (int j = 0; j < T; ++j) acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
      }
    }
    if (k < a.n) {
      const auto m = static_cast<__mmask16>((1u << (a.n - k)) - 1);
      __m512 xv[T];
      for (int j = 0; j < T; ++j) xv[j] = _mm512_maskz_loadu_ps(m, x.p[j] + k);
      for (int i = 0; i < R; ++i) {
        const __m512 wv = L::load(w.p[i] + k, m);
        for (int j = 0; j < T; ++j) acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
      }
    }
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) a.y[(t + j) * a.ldy + r + i] = _mm512_reduce_add_ps(acc[i][j]);
  }
};

// ---- 32-element formats ---------------------------------------------------------------

// Quants of two nibble blocks as 64 unsigned bytes in element order:
// [lo(q0), hi(q0), lo(q1), hi(q1)] 16 bytes each. kPair = false: q1 absent.
template <bool kPair>
inline __m512i nibbles(const uint8_t* q0, const uint8_t* q1) {
  const __m256i a =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q0)));
  const __m256i b =
      kPair ? _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q1)))
            : _mm256_setzero_si256();
  const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
  return _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)),
                          _mm512_set1_epi8(0x0f));
}

// Adds 16 to the bytes whose bit is set in the two blocks' 32-bit qh fields.
template <bool kPair>
inline __m512i add_fifth_bit(__m512i v, const uint8_t* qh0, const uint8_t* qh1) {
  uint32_t h0, h1 = 0;
  std::memcpy(&h0, qh0, 4);
  if (kPair) std::memcpy(&h1, qh1, 4);
  const __mmask64 m = _cvtu64_mask64(h0 | (static_cast<uint64_t>(h1) << 32));
  return _mm512_mask_add_epi8(v, m, v, _mm512_set1_epi8(16));
}

// Per format: the activation block type, the offset added to the stored
// quants (0 for the affine formats, which instead have a min), and the
// unsigned quants and f16 scale (and min) fields of a block.
struct Q4_0Fmt {
  using WB = BlockQ4_0;
  using XB = BlockQ8_0;
  static constexpr int kOffset = 8;
  template <bool kPair>
  static __m512i quants(const WB* b) {
    return nibbles<kPair>(b[0].qs, b[kPair ? 1 : 0].qs);
  }
};
struct Q5_0Fmt {
  using WB = BlockQ5_0;
  using XB = BlockQ8_0;
  static constexpr int kOffset = 16;
  template <bool kPair>
  static __m512i quants(const WB* b) {
    const WB& b1 = b[kPair ? 1 : 0];
    return add_fifth_bit<kPair>(nibbles<kPair>(b[0].qs, b1.qs), b[0].qh, b1.qh);
  }
};
struct Q8_0Fmt {
  using WB = BlockQ8_0;
  using XB = BlockQ8_0;
  static constexpr int kOffset = 128;
  template <bool kPair>
  static __m512i quants(const WB* b) {
    return _mm512_xor_si512(load_pair32<kPair>(b[0].qs, b[kPair ? 1 : 0].qs),
                            _mm512_set1_epi8(-128));
  }
};
struct Q4_1Fmt {
  using WB = BlockQ4_1;
  using XB = BlockQ8_1;
  static constexpr int kOffset = 0;
  template <bool kPair>
  static __m512i quants(const WB* b) {
    return nibbles<kPair>(b[0].qs, b[kPair ? 1 : 0].qs);
  }
};
struct Q5_1Fmt {
  using WB = BlockQ5_1;
  using XB = BlockQ8_1;
  static constexpr int kOffset = 0;
  template <bool kPair>
  static __m512i quants(const WB* b) {
    const WB& b1 = b[kPair ? 1 : 0];
    return add_fifth_bit<kPair>(nibbles<kPair>(b[0].qs, b1.qs), b[0].qh, b1.qh);
  }
};

template <class F>
struct LegacyKernel {
  using WB = typename F::WB;
  using XB = typename F::XB;
  static constexpr bool kAffine = F::kOffset == 0;  // has a min: x = d*q + m
  static constexpr int kRows = 4, kToks = 3;        // 12 accumulators + 9 token registers
  static constexpr int kDecodeRows = 8;

  // Activation state of one token for one step of two blocks.
  struct Act {
    __m512i q;    // 64 signed quants
    __m512 d;     // d per lane (block 0: lanes 0-7, block 1: lanes 8-15)
    __m512i neg;  // -offset * (sum of the lane's 4 quants); 0 for affine formats
    __m512 s;     // affine formats: s / 8 per lane, so 8 lanes sum to s
  };

  template <bool kPair>
  static Act load_act(const XB* x) {
    const XB& x1 = x[kPair ? 1 : 0];
    Act v;
    v.q = load_pair32<kPair>(x[0].qs, x1.qs);
    v.d = half_pair(x[0].d, kPair ? x1.d : uint16_t{0});
    if constexpr (kAffine) {
      v.s = _mm512_mul_ps(half_pair(x[0].s, kPair ? x1.s : uint16_t{0}), _mm512_set1_ps(0.125f));
      v.neg = _mm512_setzero_si512();
    } else {
      const __m512i sums = _mm512_dpbusd_epi32(
          _mm512_setzero_si512(), _mm512_set1_epi8(static_cast<char>(F::kOffset)), v.q);
      v.neg = _mm512_sub_epi32(_mm512_setzero_si512(), sums);
      v.s = _mm512_setzero_ps();
    }
    return v;
  }

  template <bool kPair, int R, int T>
  static inline __attribute__((always_inline)) void step(const RowPtrs<WB, R>& w,
                                                         const TokPtrs<XB, T>& x, int64_t b,
                                                         __m512 (&acc)[R][T]) {
    Act xa[T];
    for (int j = 0; j < T; ++j) xa[j] = load_act<kPair>(x.p[j] + b);
    for (int i = 0; i < R; ++i) {
      const WB* wb = w.p[i] + b;
      prefetch_weights(wb, R * w.stride, 1);
      const __m512i q = F::template quants<kPair>(wb);
      const __m512 d = half_pair(wb[0].d, kPair ? wb[1].d : uint16_t{0});
      __m512 m = _mm512_setzero_ps();
      if constexpr (kAffine) m = half_pair(wb[0].m, kPair ? wb[1].m : uint16_t{0});
      for (int j = 0; j < T; ++j) {
        const __m512i dot = _mm512_dpbusd_epi32(xa[j].neg, q, xa[j].q);
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(d, xa[j].d), acc[i][j]);
        if constexpr (kAffine) acc[i][j] = _mm512_fmadd_ps(m, xa[j].s, acc[i][j]);
      }
    }
  }

  template <int R, int T>
  static void tile(const GemmArgs& a, int64_t r, int64_t t) {
    const RowPtrs<WB, R> w(a, r);
    const TokPtrs<XB, T> x(a, t);
    __m512 acc[R][T];
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) acc[i][j] = _mm512_setzero_ps();
    const int64_t nb = a.n / kQK;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) step<true>(w, x, b, acc);
    if (b < nb) step<false>(w, x, b, acc);
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) a.y[(t + j) * a.ldy + r + i] = _mm512_reduce_add_ps(acc[i][j]);
  }
};

Backend make_backend() {
  Backend be;
  auto set = [&](DType t, GemmFn f) { be.gemm[static_cast<int>(t)] = f; };
  set(DType::F32, run_tiles<FloatKernel<LoadF32>>);
  set(DType::F16, run_tiles<FloatKernel<LoadF16>>);
  set(DType::BF16, run_tiles<FloatKernel<LoadBF16>>);
  set(DType::Q4_0, run_tiles<LegacyKernel<Q4_0Fmt>>);
  set(DType::Q4_1, run_tiles<LegacyKernel<Q4_1Fmt>>);
  set(DType::Q5_0, run_tiles<LegacyKernel<Q5_0Fmt>>);
  set(DType::Q5_1, run_tiles<LegacyKernel<Q5_1Fmt>>);
  set(DType::Q8_0, run_tiles<LegacyKernel<Q8_0Fmt>>);
  register_kquants_avx512(be);
  register_interleaved_avx512(be);
  register_attn_avx512(be);
  register_act_avx512(be);
  return be;
}

}  // namespace

const Backend& avx512_backend() {
  static const Backend be = make_backend();
  return be;
}

}  // namespace edgelm::kernels
