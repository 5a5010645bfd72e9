// AVX2 gemm over the interleaved layout (pack.cpp) for Q4_0: a tile is one
// group of 16 rows, handled as two halves of 8 rows (one 32-bit lane per
// row). Per block and half, the 8 rows' quants are loaded and split into
// nibbles once (eight registers) and used for up to four tokens at a time.
// Per token, eight vpmaddubsw multiply the unsigned nibbles by the token's
// activation bytes broadcast to every lane; their 16-bit pair sums stay
// below 8 x 2 x 15 x 127 = 30480, so they are added as 16-bit values and
// widened once (vpmaddwd with ones). The integer sum gets the activation
// row's trailer (-8 x sum of quants, which removes Q4_0's offset exactly),
// then one conversion and one multiply-add apply the block scales.
//
// Without VNNI this is about 2.5 instructions per 32 products instead of
// the row layout's 6 (sign fix-up, per-row reduction and scale per block).
// Q8_0 stays in the row layout here: its unsigned quants (q + 128) times
// 127 overflow vpmaddubsw's 16-bit pair sums.
//
// The loop nest around the tiles is interleaved_driver.h's.
#include <immintrin.h>

#include <cstring>

#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/interleaved_driver.h"

namespace edgelm::kernels {

// The K formats' interleaved kernels (interleaved_kquants_avx2.cpp).
void register_interleaved_kquants_avx2(Backend& be);

namespace {

constexpr size_t kBlock = Q4_0Layout::kBlock;
constexpr int kPrefetch = 8;                        // blocks ahead in the weight stream
constexpr int kSubTokens = 4;                       // tokens per pass over a half's quants

inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Rows 8h..8h+7 of one packed block: nibble vectors q[0..3] are elements
// 4c..4c+3 (low nibbles of chunk c), q[4..7] elements 16+4c.. (high).
inline __attribute__((always_inline)) void half_quants(const uint8_t* blk, int h, __m256i (&q)[8]) {
  const __m256i m = _mm256_set1_epi8(0x0F);
  for (int c = 0; c < 4; ++c) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32 + 64 * c + 32 * h));
    q[c] = _mm256_and_si256(v, m);
    q[c + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
  }
}

// Tokens [j0, j0 + TS) against half h of one group, accumulated into
// acc[0..TS) over every block.
template <int TS>
inline __attribute__((always_inline)) void half_pass(const uint8_t* gp, int h, int64_t nb, const uint8_t* const* xr,
                                                     __m256 (&acc)[TS]) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = gp + static_cast<size_t>(b) * kBlock;
    if (h == 0) {
      const char* ahead = reinterpret_cast<const char*>(blk + kPrefetch * kBlock);
      for (size_t off = 0; off < kBlock; off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h)));
    __m256i q[8];
    half_quants(blk, h, q);
    for (int j = 0; j < TS; ++j) {
      const auto* xb = reinterpret_cast<const BlockQ8_0*>(xr[j]) + b;
      __m256i s16 = _mm256_maddubs_epi16(q[0], bcast4(xb->qs + Q4_0Layout::act_offset(0)));
      for (int c = 1; c < 8; ++c) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(q[c], bcast4(xb->qs + Q4_0Layout::act_offset(c))));
      const __m256i s32 = _mm256_add_epi32(_mm256_madd_epi16(s16, ones), _mm256_set1_epi32(i16_trailer(xr[j], nb, b)));
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), _mm256_mul_ps(dw, _mm256_set1_ps(_cvtsh_ss(xb->d))), acc[j]);
    }
  }
}

// G consecutive groups of 16 rows x T tokens; y is the first row's output
// column for token 0 of the tile.
template <int G, int T>
void tile(const GemmArgs& a, const uint8_t* gp, size_t group_bytes, int64_t nb, int64_t t0, float* y) {
  for (int g = 0; g < G; ++g) {
    for (int h = 0; h < 2; ++h) {
      for (int j0 = 0; j0 < T; j0 += kSubTokens) {
        const uint8_t* xr[kSubTokens];
        for (int j = 0; j < kSubTokens && j0 + j < T; ++j)
          xr[j] = static_cast<const uint8_t*>(a.x) + (t0 + j0 + j) * a.x_stride;
        auto finish = [&]<int TS>(__m256(&acc)[TS]) {
          for (int j = 0; j < TS; ++j) _mm256_storeu_ps(y + g * 16 + 8 * h + (t0 + j0 + j) * a.ldy, acc[j]);
        };
        auto run = [&]<int TS>() {
          __m256 acc[TS];
          for (int j = 0; j < TS; ++j) acc[j] = _mm256_setzero_ps();
          half_pass<TS>(gp + g * group_bytes, h, nb, xr, acc);
          finish(acc);
        };
        switch (T - j0 < kSubTokens ? T - j0 : kSubTokens) {
          case 1: run.template operator()<1>(); break;
          case 2: run.template operator()<2>(); break;
          case 3: run.template operator()<3>(); break;
          default: run.template operator()<4>(); break;
        }
      }
    }
  }
}

void gemm_q4_0_i16(const GemmArgs& a, int64_t r0, int64_t r1) {
  const int64_t nb = a.n / 32;
  const size_t gb = 16 * a.w_stride;  // bytes of one group of 16 rows
  i16_drive(a, r0, r1, gb, [&]<int G, int T>(const uint8_t* gp, int64_t t0, float* y) {
    tile<G, T>(a, gp, gb, nb, t0, y);
  });
}

}  // namespace

void register_interleaved_avx2(Backend& be) {
  be.gemm_i16[static_cast<int>(DType::Q4_0)] = gemm_q4_0_i16;
  register_interleaved_kquants_avx2(be);
}

}  // namespace edgelm::kernels
