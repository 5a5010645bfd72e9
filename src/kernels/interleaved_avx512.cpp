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

// Blocks prefetched ahead in each group's stream (a block of a pair,
// kStep: 9 KiB ahead for Q4_0 decode). Decode of Qwen2-1.5B Q4_0 at 2
// threads, medians of 5: 4 blocks (two lines each) 19.2 tokens/s, 4 blocks
// (every line) 21.5, 8 blocks 22.5, 12-16 the same within noise; that was
// with two streams per thread (two groups per decode tile). Decode then
// read one stream of one group, and 16 blocks kept the same bytes in
// flight: Q8_0 decode gemm single-thread 7.1 ms per 62 MB at 16 against
// 9.0-9.6 at 8. With the groups paired, 8 and 16 pairs ahead measured the
// same within the noise (bm_decode_layers_pool). Tiles of several tokens
// (prefill) keep 8.
template <int T>
constexpr int kPrefetch = T == 1 ? 16 : 8;

// Decode (one token) requests its weights non-temporal. A group's weights
// pass once through L1 (80 KB of Q4_0 per group of the MLP's down
// projection, whose rows are 8960 long); requested into L1 as ordinary
// lines, they likely push out the activation row (10.6 KB there), which
// every group reads again: the down projection alone was the shape that
// gained, and requesting into L2 only (T1) gained there too. The weights
// of 28 Qwen2-1.5B layers in Q4_0 (bm_decode_layers_pool, four alternated
// rounds, medians of 3, a busy machine): one thread 32.9-36.6 ms with T0,
// 30.5-33.0 with NTA; two threads 17.7-17.9 and 17.0-17.4. End to end
// (`edgelm bench --threads 2 -n 128`, six alternated pairs) the gain,
// about 2%, is within the noise.
// Tiles of several tokens read each block once per token and keep T0.
// As __builtin_prefetch's locality (prefetch_lines, prefetch_from): 0 is
// prefetchnta, 3 prefetcht0.
template <int T>
constexpr int kWeightLocality = T == 1 ? 0 : 3;

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
    const uint8_t* ahead = gp + static_cast<size_t>(b + kPrefetch<T>) * F::kStep;
    if constexpr (T == 1) {
      // Decode: the lines of the tile's blocks (a pair's: whole lines)
      // kPrefetch<T> blocks ahead in the group's stream, each line once.
      prefetch_lines<G * F::kBlock, kWeightLocality<T>>(ahead);
    } else {
      // Prompt tiles: every 64 bytes of the block kPrefetch<T> blocks ahead
      // from its start, as before the pairing. One group's blocks are not
      // one stream of lines: counting lines as above leaves out the line an
      // odd group's block starts in. (bm_gemm_i16_prompt on a busy host
      // could not tell the two forms apart beyond its noise.)
      prefetch_from<F::kBlock, kWeightLocality<T>>(ahead);
    }
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
