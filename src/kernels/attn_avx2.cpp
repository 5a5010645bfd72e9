// AVX2 attention tile kernels: KV rows to f32, the score tile Q x K^T and
// the P x V accumulation (see kernels.h), 8 lanes and a scalar tail for rows
// that are not a multiple of 8. The tiles and exp are attn_tiles.h's.

#include <immintrin.h>

#include "kernels/attn_tiles.h"
#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/simd_avx2.h"

namespace edgelm::kernels {
namespace {

using namespace avx2;

struct Tiles : VecTiles<F32x8> {
  static void kv_f16(const void* src, float* dst, int64_t n) {
    const auto* h = static_cast<const uint16_t*>(src);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, F32x8::load_f16(h + i));
    for (; i < n; ++i) dst[i] = half_to_float(h[i]);
  }

  static void kv_q8_0(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const BlockQ8_0*>(src);
    for (int64_t k = 0; k < n / kQK; ++k, dst += kQK) {
      const __m256 d = _mm256_set1_ps(half_to_float(b[k].d));
      for (int j = 0; j < kQK; j += 8) {
        const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[k].qs + j));
        _mm256_storeu_ps(dst + j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), d));
      }
    }
  }
};

}  // namespace

void register_attn_avx2(Backend& be) {
  register_attn<Tiles>(be);
  register_elementwise<F32x8>(be);
}

}  // namespace edgelm::kernels
