// Internal: the loop nest shared by every SIMD gemm. A kernel type K computes
// one tile of R weight rows x T activation rows in registers:
//
//   template <int R, int T> static void K::tile(const GemmArgs& a, int64_t r, int64_t t);
//     // y[(t + j) * ldy + r + i] for i < R, j < T
//   static constexpr int kRows, kToks;  // the full tile
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

#include <algorithm>
#include <cstdint>

#include "kernels/kernels.h"

namespace edgelm::kernels {
namespace {

constexpr size_t kTokenChunkBytes = 256 * 1024;

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

template <class K>
void run_tiles(const GemmArgs& a, int64_t r0, int64_t r1) {
  const int64_t per_chunk = std::max<int64_t>(
      K::kToks, static_cast<int64_t>(kTokenChunkBytes / std::max<size_t>(a.x_stride, 1)) /
                    K::kToks * K::kToks);
  for (int64_t t0 = 0; t0 < a.n_tok; t0 += per_chunk) {
    const int64_t t1 = std::min(a.n_tok, t0 + per_chunk);
    int64_t r = r0;
    for (; r + K::kRows <= r1; r += K::kRows) token_tiles<K, K::kRows>(a, r, t0, t1);
    for (; r < r1; ++r) token_tiles<K, 1>(a, r, t0, t1);
  }
}

// Row and token pointers of a tile.
template <class W, int R>
struct RowPtrs {
  const W* p[R];
  RowPtrs(const GemmArgs& a, int64_t r) {
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
