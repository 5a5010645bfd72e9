// Internal: the loop nest shared by every SIMD gemm. A kernel type K computes
// one tile of R weight rows x T activation rows in registers:
//
//   template <int R, int T> static void K::tile(const GemmArgs& a, int64_t r, int64_t t);
//     // y[(t + j) * ldy + r + i] for i < R, j < T
//   static constexpr int kRows, kToks;  // the full tile
//   static constexpr int kDecodeRows;   // rows per tile for a single token
//                                       // (decode: no reuse across tokens, so
//                                       // registers go to more row streams)
//
// Each weight block is decoded once per tile and used for T tokens, and each
// activation block once per tile for R rows. Loop order, outermost first:
//   token chunks of ~256 KiB of activations (they stay in L2),
//   row tiles (the R rows' weights are streamed from memory once per chunk),
//   token tiles within the chunk.
// So for decode (n_tok == 1) the weights stream exactly once, in R parallel
// row streams; for prefill they are read from memory once per chunk and from
// L1 for every token tile of it.
//
// Everything here has internal linkage (see fp16.h for why that matters in
// files compiled with different -m flags); K is always a type local to one
// translation unit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"

namespace edgelm::kernels {
namespace {

constexpr size_t kTokenChunkBytes = 256 * 1024;
constexpr int kPrefetchLocality = 2;  // __builtin_prefetch: 3 = all levels, 2 = L2 and out

// Dispatches a runtime tail count 1 <= rem < T to the matching template.
template <class K, int R, int T>
inline void token_tail(const GemmArgs& a, int64_t r, int64_t t, int64_t rem) {
  if constexpr (T > 0) {
    if (rem == T) {
      K::template tile<R, T>(a, r, t);
    } else {
      token_tail<K, R, T - 1>(a, r, t, rem);
    }
  }
}

template <class K, int R>
inline void token_tiles(const GemmArgs& a, int64_t r, int64_t t0, int64_t t1) {
  int64_t t = t0;
  for (; t + K::kToks <= t1; t += K::kToks) K::template tile<R, K::kToks>(a, r, t);
  if (t < t1) token_tail<K, R, K::kToks - 1>(a, r, t, t1 - t);
}

template <class K, int R>
inline void row_tiles(const GemmArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  int64_t r = r0;
  for (; r + R <= r1; r += R) token_tiles<K, R>(a, r, t0, t1);
  for (; r < r1; ++r) token_tiles<K, 1>(a, r, t0, t1);
}

template <class K>
void run_tiles(const GemmArgs& a, int64_t r0, int64_t r1) {
  // Tokens per chunk: a multiple of the token tile, at least one tile. (No
  // std::min/max: a copy of them emitted from a SIMD file could be the one the
  // linker keeps for portable code too; see fp16.h.)
  const size_t row = a.x_stride > 0 ? a.x_stride : 1;
  int64_t per_chunk = static_cast<int64_t>(kTokenChunkBytes / row) / K::kToks * K::kToks;
  if (per_chunk < K::kToks) per_chunk = K::kToks;
  for (int64_t t0 = 0; t0 < a.n_tok; t0 += per_chunk) {
    const int64_t t1 = t0 + per_chunk < a.n_tok ? t0 + per_chunk : a.n_tok;
    if (t1 - t0 == 1) {
      row_tiles<K, K::kDecodeRows>(a, r0, r1, t0, t1);
    } else {
      row_tiles<K, K::kRows>(a, r0, r1, t0, t1);
    }
  }
}

// Software prefetch for the weight stream. Rows are contiguous, so the bytes
// a row tile reads next are those of the following tile: each kernel asks for
// the lines `ahead` = R * w_stride past the block it is decoding, into L2.
// (Hardware prefetchers follow one stream well, but a tile walks R rows in
// lock step, which for short rows looks like scattered accesses.) Prefetches
// past the end of the matrix are harmless: they never fault.
inline void prefetch_weights(const void* p, size_t ahead, int bytes) {
  const char* c = static_cast<const char*>(p) + ahead;
#pragma GCC unroll 8
  for (int off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, 0, kPrefetchLocality);
}

// Row and token pointers of a tile.
template <class W, int R>
struct RowPtrs {
  const W* p[R];
  size_t stride;  // bytes between rows
  RowPtrs(const GemmArgs& a, int64_t r) : stride(a.w_stride) {
    for (int i = 0; i < R; ++i) {
      p[i] = reinterpret_cast<const W*>(static_cast<const uint8_t*>(a.w) + (r + i) * a.w_stride);
    }
  }
};
template <class X, int T>
struct TokPtrs {
  const X* p[T];
  TokPtrs(const GemmArgs& a, int64_t t) {
    for (int j = 0; j < T; ++j) {
      p[j] = reinterpret_cast<const X*>(static_cast<const uint8_t*>(a.x) + (t + j) * a.x_stride);
    }
  }
};

}  // namespace
}  // namespace edgelm::kernels
