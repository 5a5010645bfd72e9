// Internal: small AVX-512 helpers shared by the *_avx512.cpp files. Include
// only from files compiled with the AVX-512 flags. Everything is static
// inline (see fp16.h for why).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace edgelm::kernels::avx512 {

// f16 h0 in lanes 0-7, h1 in lanes 8-15, as f32: the scales of two blocks
// laid out like the int32 lanes vpdpbusd produces for them.
// The two halves are combined in a general register (ports the vector code
// does not need), converted together, then spread with one permute.
static inline __m512 half_pair(uint16_t h0, uint16_t h1) {
  const __m128 f =
      _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h0 | (static_cast<uint32_t>(h1) << 16))));
  return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                               _mm512_castps128_ps512(f));
}

// 32 bytes from p0 then 32 from p1 (zeros when kPair is false).
template <bool kPair>
static inline __m512i load_pair32(const void* p0, const void* p1) {
  const __m256i a = _mm256_loadu_si256(static_cast<const __m256i*>(p0));
  const __m256i b =
      kPair ? _mm256_loadu_si256(static_cast<const __m256i*>(p1)) : _mm256_setzero_si256();
  return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}

static inline float half_to_float(uint16_t h) {
  return _cvtsh_ss(h);
}

// 16 f32 lanes: the operations attn_tiles.h's exp_neg needs. (The other
// kernels written once over a vector type do not fit AVX-512, which ends a
// row with a masked vector rather than a scalar tail.)
namespace {
struct F32x16 {
  using V = __m512;
  static V splat(float f) { return _mm512_set1_ps(f); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }    // a * b + c
  static V fnma(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a * b
  static V round(V v) {
    return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static V scale_pow2(V p, V n) { return _mm512_scalef_ps(p, n); }  // p * 2^n
  // y where x >= lim, else 0.
  static V keep_ge(V y, V x, float lim) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(lim), _CMP_GE_OQ), y);
  }
};
}  // namespace

}  // namespace edgelm::kernels::avx512
