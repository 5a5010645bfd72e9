// AVX-512 VNNI gemm over the interleaved layout (pack.cpp): a tile is one
// group of 16 rows x up to 8 tokens. Per block, the 16 rows' quants are
// loaded (and split into nibbles) once and used for every token of the tile;
// per token, eight vpdpbusd against four activation bytes broadcast to all
// lanes leave the 16 rows' integer dot products in one register, and one
// conversion and one multiply-add apply the block scales. The integer sum
// starts from -offset x the activations' sum (the row's trailer holds the
// sum), which removes the format's offset exactly. Q4_1 and Q5_1 read q
// unsigned (no offset) and add one more multiply-add for the minimums.
//
// The loop nest around the tiles is interleaved_driver.h's.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/interleaved_driver.h"

namespace edgelm::kernels {

// The K formats' interleaved kernels (interleaved_kquants_avx512.cpp).
void register_interleaved_kquants_avx512(Backend& be);

namespace {

// Prompt tiles request every 64 bytes of the block kPrefetch blocks ahead
// of the one they read, as ordinary lines (T0): each block is read once
// per token of the tile.
//
// Decode (one token) requests nothing: since its tile reads one stream (a
// pair's blocks, whole lines, or one Q8_0 group's), the hardware's stream
// prefetcher keeps ahead of it, and on this Zen 4 the requests cost more
// than they gave.
// 28 Qwen2-1.5B layers (bm_decode_layers_vs_read, the products' speed as a
// share of a plain read of the same bytes just before; medians of 3,
// rounds alternating the two builds, load 0.8-1.8, busy), without the
// requests against 16 blocks ahead non-temporal: Q4_0 one thread
// 0.96-0.97 against 0.74-0.88 (three rounds), two threads median 0.96
// against 0.94 (six rounds, ahead in four); Q8_0 one thread 0.89-0.97
// against 0.83-0.86, two threads 0.93-0.98 against 0.81-0.94 (four
// rounds). 4, 8 and 32 blocks ahead were no better than 16. End to end
// (`edgelm bench --threads 2 -p 8 -n 128 -r 1`, alternated pairs, busy),
// the median of the pairs' ratios: Q4_0 1.03 (12 pairs), Q8_0 1.20 and
// 1.24 (12 and 8). (Before the pairing, with two streams per thread, the
// requests had gained 15%.) The K formats keep theirs
// (interleaved_kquants_avx512.cpp says why).
//
// Open: on a Zen 5 host (EPYC, family 26 model 2; 2026-12-07) Q4_0 and
// Q8_0 decode reach 0.69-0.89 of the read at one and two threads
// (bm_decode_layers_vs_read/{2,8}/2/{1,2}), where Q4_K reaches 0.95-1.14,
// and end to end Q4_0 decodes at 68-87% of the weights' read. Each of these
// was tried against this code in alternated rounds and moved nothing:
// requests non-temporal 2304, 4608 or 9216 bytes ahead, or T0 4608 ahead;
// each 64 bytes loaded once (GCC folds the load into both the mask and the
// shift, two loads); loads of two 32-byte halves; the quants read from
// line-aligned addresses (wrong products, to rule out the lines a load
// straddles); one group at a time instead of a pair; the scales a
// constant instead of converted from f16 (wrong products again); --isa
// avxvnni or avx2. A tile that only loads and folds the quants (no scales,
// no activations) reached 0.89. The cause is not found.
constexpr int kPrefetch = 8;

inline float half(const uint16_t& h) { return _cvtsh_ss(h); }

inline __m512i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// The nibble formats: the quants of chunk c at L::kQuants + 64c, split into
// low (q[c]) and high (q[c + 4]) nibbles, read as unsigned q; the sum starts
// from -kOff x the activations' sum. X: the activation block (Q4_1 and Q5_1
// meet Q8_1 rows, whose s = d x the block's sum carries the minimum's term).
template <class L, int32_t kOff, class X = BlockQ8_0>
struct Nibbles16 : L {
  using XB = X;
  static constexpr int32_t kOffset = kOff;
  static constexpr bool kHasMins = std::is_same_v<X, BlockQ8_1>;
  static constexpr int act_offset(int c) { return Q4_0Layout::act_offset(c); }
  static inline __attribute__((always_inline)) void nibbles(const uint8_t* blk, __m512i (&q)[8]) {
    const __m512i m = _mm512_set1_epi8(0x0F);
    for (int c = 0; c < 4; ++c) {
      const __m512i v = _mm512_loadu_si512(blk + L::kQuants + 64 * c);
      q[c] = _mm512_and_si512(v, m);
      q[c + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
    }
  }
  static inline __attribute__((always_inline)) void quants(const uint8_t* blk, __m512i (&q)[8]) { nibbles(blk, q); }
};

// Q5_0 and Q5_1: the nibbles with 16 added where the fifth bit is set (its
// inverted bit clear): the bits of chunk c shifted to bit 4 of each byte
// (16-bit shifts keep every bit in its byte for these distances).
template <class L, int32_t kOff, class X = BlockQ8_0>
struct Fifths16 : Nibbles16<L, kOff, X> {
  static inline __attribute__((always_inline)) void quants(const uint8_t* blk, __m512i (&q)[8]) {
    const __m512i b16 = _mm512_set1_epi8(0x10);
    const __m512i inv = _mm512_loadu_si512(blk + L::kHigh);
    __m512i n[8];
    Nibbles16<L, kOff, X>::nibbles(blk, n);
    q[0] = _mm512_andnot_si512(_mm512_slli_epi16(inv, 4), b16);
    q[1] = _mm512_andnot_si512(_mm512_slli_epi16(inv, 3), b16);
    q[2] = _mm512_andnot_si512(_mm512_slli_epi16(inv, 2), b16);
    q[3] = _mm512_andnot_si512(_mm512_slli_epi16(inv, 1), b16);
    q[4] = _mm512_andnot_si512(inv, b16);
    q[5] = _mm512_andnot_si512(_mm512_srli_epi16(inv, 1), b16);
    q[6] = _mm512_andnot_si512(_mm512_srli_epi16(inv, 2), b16);
    q[7] = _mm512_andnot_si512(_mm512_srli_epi16(inv, 3), b16);
    for (int c = 0; c < 8; ++c) q[c] = _mm512_or_si512(q[c], n[c]);
  }
};

using Q4_0I16 = Nibbles16<Q4_0Layout, 8>;
using Q5_0I16 = Fifths16<Q5_0Layout, 16>;
using Q4_1I16 = Nibbles16<Q4_1Layout, 0, BlockQ8_1>;
using Q5_1I16 = Fifths16<Q5_1Layout, 0, BlockQ8_1>;

struct Q8_0I16 : Q8_0Layout {
  using XB = BlockQ8_0;
  static constexpr bool kHasMins = false;
  static_assert(kQ8_0PackedBias == 0x80, "vpdpbusd reads the packed quants as q + 128");
  static inline __attribute__((always_inline)) void quants(const uint8_t* blk, __m512i (&q)[8]) {
    for (int c = 0; c < 8; ++c) q[c] = _mm512_loadu_si512(blk + kQuants + 64 * c);
  }
};

// G groups of 16 rows x T tokens (G = 2: both groups of a pair, one token).
template <class F, int G, int T>
inline __attribute__((always_inline)) void tile(const GemmArgs& a, const uint8_t* gp, int64_t nb,
                                                int64_t t0, float* y) {
  const uint8_t* xr[T];
  for (int j = 0; j < T; ++j) xr[j] = static_cast<const uint8_t*>(a.x) + (t0 + j) * a.x_stride;
  __m512 acc[G][T];
  for (int g = 0; g < G; ++g)
    for (int j = 0; j < T; ++j) acc[g][j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512 dw[G], mw[G];
    __m512i q[G][8];
    // Prompt tiles: every 64 bytes of the block kPrefetch blocks ahead
    // from its start. One group's blocks are not one stream of lines in
    // the paired formats (its partner's block lies between two of its own),
    // so the line a block starts mid-way in is requested with it.
    if constexpr (T > 1)
      prefetch_from<F::kBlock, 3>(gp + static_cast<size_t>(b + kPrefetch) * F::kStep);
    for (int g = 0; g < G; ++g) {
      const uint8_t* blk = gp + g * F::kBlock + static_cast<size_t>(b) * F::kStep;
      dw[g] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
      if constexpr (F::kHasMins)
        mw[g] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + F::kMinsAt)));
      F::quants(blk, q[g]);
    }
    for (int j = 0; j < T; ++j) {
      const auto* xb = reinterpret_cast<const typename F::XB*>(xr[j]) + b;
      const __m512 dx = _mm512_set1_ps(half(xb->d));
      const __m512i init = _mm512_set1_epi32(i16_start<F, typename F::XB>(xr[j], nb, b));
      for (int g = 0; g < G; ++g) {
        // Independent partial sums: vpdpbusd has a latency of several
        // cycles, and with few tokens nothing else would fill it.
        constexpr int kParts = T * G <= 2 ? 4 : 2;
        __m512i s[kParts];
        s[0] = init;
        for (int p = 1; p < kParts; ++p) s[p] = _mm512_setzero_si512();
        for (int c = 0; c < 8; ++c)
          s[c % kParts] = _mm512_dpbusd_epi32(s[c % kParts], q[g][c], bcast4(xb->qs + F::act_offset(c)));
        for (int p = 1; p < kParts; ++p) s[0] = _mm512_add_epi32(s[0], s[p]);
        acc[g][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[0]), _mm512_mul_ps(dw[g], dx), acc[g][j]);
        // Q4_1 and Q5_1: + m x s, ggml's term for the minimum.
        if constexpr (F::kHasMins) acc[g][j] = _mm512_fmadd_ps(mw[g], _mm512_set1_ps(half(xb->s)), acc[g][j]);
      }
    }
  }
  for (int g = 0; g < G; ++g)
    for (int j = 0; j < T; ++j) _mm512_storeu_ps(y + g * 16 + (t0 + j) * a.ldy, acc[g][j]);
}

template <class F>
void gemm_i16(const GemmArgs& a, int64_t r0, int64_t r1) {
  const int64_t nb = a.n / 32;
  const auto groups = groups_of<F>(a);
  i16_drive(a, r0, r1, groups, [&]<int G, int T>(const uint8_t* gp, int64_t t0, float* y) {
    tile<F, G, T>(a, gp, nb, t0, y);
  });
}

}  // namespace

void register_interleaved_avx512(Backend& be) {
  be.gemm_i16[static_cast<int>(DType::Q4_0)] = gemm_i16<Q4_0I16>;
  be.gemm_i16[static_cast<int>(DType::Q8_0)] = gemm_i16<Q8_0I16>;
  be.gemm_i16[static_cast<int>(DType::Q5_0)] = gemm_i16<Q5_0I16>;
  be.gemm_i16[static_cast<int>(DType::Q4_1)] = gemm_i16<Q4_1I16>;
  be.gemm_i16[static_cast<int>(DType::Q5_1)] = gemm_i16<Q5_1I16>;
  register_interleaved_kquants_avx512(be);
}

}  // namespace edgelm::kernels
