// Internal: small AVX2 helpers shared by the *_avx2.cpp files. Include only
// from files compiled with the AVX2 flags. Static inline (see fp16.h).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace edgelm::kernels::avx2 {

static inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

static inline int hsum_i32(__m256i v) {
  const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i t = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  return _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, 1)));
}

static inline float hmax(__m256 v) {
  const __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(t, _mm_movehdup_ps(t)));
}

static inline __m256 abs_ps(__m256 v) {
  return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
}

static inline float half_to_float(uint16_t h) {
  return _cvtsh_ss(h);
}

static inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
static inline __m128i load128(const void* p) {
  return _mm_loadu_si128(static_cast<const __m128i*>(p));
}

// Pairwise sums of u8 x s8 products widened to 8 x int32.
static inline __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// 8 f32 lanes: the operations of the kernels that are written once over a
// vector type (float_rows.h, attn_tiles.h), as the AVX2 instructions they
// were written with here before. Internal linkage, as everything above.
namespace {
struct F32x8 {
  using V = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kRegisters = 16;
  static V zero() { return _mm256_setzero_ps(); }
  static V splat(float f) { return _mm256_set1_ps(f); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V load_f16(const uint16_t* p) { return _mm256_cvtph_ps(load128(p)); }
  static V load_bf16(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
  }
  static float half(uint16_t h) { return half_to_float(h); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }    // a * b + c
  static V fnma(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a * b
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V neg_abs(V v) { return _mm256_or_ps(v, _mm256_set1_ps(-0.0f)); }  // -|v|
  static V if_neg(V x, V a, V b) { return _mm256_blendv_ps(b, a, x); }     // x < 0 (sign set) ? a : b
  // Pairs of lanes (2i, 2i+1), for RoPE: each pair's first lane in both,
  // its second in both, the two swapped; a - b in even lanes, a + b in odd.
  static V dup_even(V v) { return _mm256_moveldup_ps(v); }
  static V dup_odd(V v) { return _mm256_movehdup_ps(v); }
  static V swap_pairs(V v) { return _mm256_permute_ps(v, 0xB1); }
  static V sub_add(V a, V b) { return _mm256_addsub_ps(a, b); }
  static V round(V v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static float sum(V v) { return hsum(v); }
  // out[0..4) = sum(a), sum(b), sum(c), sum(d), each added in hsum's order
  // ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)), so the same bits,
  // in 15 instructions instead of 4 x 6.
  static void sum4(V a, V b, V c, V d, float* out) {
    auto halves = [](V v) { return _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); };
    const __m128 a1 = halves(a), b1 = halves(b), c1 = halves(c), d1 = halves(d);
    // [s0 + s2, s1 + s3] of the first vector, then of the second.
    auto pairs = [](__m128 x, __m128 y) {
      return _mm_add_ps(_mm_shuffle_ps(x, y, _MM_SHUFFLE(1, 0, 1, 0)), _mm_shuffle_ps(x, y, _MM_SHUFFLE(3, 2, 3, 2)));
    };
    _mm_storeu_ps(out, _mm_hadd_ps(pairs(a1, b1), pairs(c1, d1)));
  }
  // out[0..8) = sum(v[0]) .. sum(v[7]), the same bits as sum4's: pairs of
  // vectors' halves added with one 256-bit add (vperm2f128 puts a's two
  // halves beside b's), then sum4's pairs and hadd, in 256-bit lanes,
  // which leave the sums in the order a c e g b d f h; one vpermps puts them
  // back. 21 instructions for 8 sums against sum4's 15 for 4.
  static void sum8(const V (&v)[8], float* out) {
    auto halves = [](V a, V b) {
      return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
    };
    auto pairs = [](V x, V y) {
      return _mm256_add_ps(_mm256_shuffle_ps(x, y, _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm256_shuffle_ps(x, y, _MM_SHUFFLE(3, 2, 3, 2)));
    };
    const V r = _mm256_hadd_ps(pairs(halves(v[0], v[1]), halves(v[2], v[3])),
                               pairs(halves(v[4], v[5]), halves(v[6], v[7])));
    _mm256_storeu_ps(out, _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static float max_lane(V v) { return hmax(v); }
  // p * 2^n for integral n in [-126, 127], built in the exponent bits.
  static V scale_pow2(V p, V n) {
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  }
  // y where x >= lim, else 0.
  static V keep_ge(V y, V x, float lim) {
    return _mm256_and_ps(y, _mm256_cmp_ps(x, _mm256_set1_ps(lim), _CMP_GE_OQ));
  }
};
}  // namespace

}  // namespace edgelm::kernels::avx2
