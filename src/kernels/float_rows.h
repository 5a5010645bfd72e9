// Internal: the kernels over rows of float values (F32, F16 or BF16 weights,
// F32 or F16 KV cache rows) that are the same arithmetic on every ISA whose
// rows end in a scalar tail: AVX2 and NEON. (AVX-512 masks its last vector
// instead and keeps its own.) Written once over a vector type S, F32x8 in
// simd_avx2.h or F32x4 in simd_neon.h:
//
//   Load<S, W>: S::kLanes elements of a row of W as a vector, and one
//     element as a float, for F32 (W = float), F16 and BF16 (uint16_t);
//   FloatKernel<L, R, T>: the gemm tile of tile_driver.h for float weights;
//   KvRows<S>: dot and axpy of an f32 row with an F32 or F16 KV cache row.
//
// Internal linkage, as tile_driver.h: S is always a type local to one
// translation unit, compiled with that ISA's flags.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/tile_driver.h"

namespace edgelm::kernels {
namespace {

template <class Vec>
struct LoadF32 {
  using S = Vec;
  using W = float;
  static typename S::V load(const float* p) { return S::load(p); }
  static float at(const float* p, int64_t i) { return p[i]; }
};
template <class Vec>
struct LoadF16 {
  using S = Vec;
  using W = uint16_t;
  static typename S::V load(const uint16_t* p) { return S::load_f16(p); }
  static float at(const uint16_t* p, int64_t i) { return S::half(p[i]); }
};
template <class Vec>
struct LoadBF16 {
  using S = Vec;
  using W = uint16_t;
  static typename S::V load(const uint16_t* p) { return S::load_bf16(p); }
  static float at(const uint16_t* p, int64_t i) {
    const uint32_t u = static_cast<uint32_t>(p[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// R rows x T tokens of y = sum(w * x), one vector per step; a row tail of
// n % kLanes elements is summed in scalar code.
template <class L, int Rows, int Toks>
struct FloatKernel {
  using S = typename L::S;
  using V = typename S::V;
  static constexpr int kRows = Rows, kToks = Toks;
  static constexpr int kDecodeRows = Rows;

  template <int R, int T>
  static void tile(const GemmArgs& a, int64_t r, int64_t t) {
    const RowPtrs<typename L::W, R> w(a, r);
    const TokPtrs<float, T> x(a, t);
    V acc[R][T];
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) acc[i][j] = S::zero();
    int64_t k = 0;
    for (; k + S::kLanes <= a.n; k += S::kLanes) {
      V xv[T];
      for (int j = 0; j < T; ++j) xv[j] = S::load(x.p[j] + k);
      for (int i = 0; i < R; ++i) {
        prefetch_weights(w.p[i] + k, R * w.stride, 1);
        const V wv = L::load(w.p[i] + k);
        for (int j = 0; j < T; ++j) acc[i][j] = S::fma(wv, xv[j], acc[i][j]);
      }
    }
    for (int i = 0; i < R; ++i) {
      for (int j = 0; j < T; ++j) {
        float s = S::sum(acc[i][j]);
        for (int64_t e = k; e < a.n; ++e) s += L::at(w.p[i], e) * x.p[j][e];
        a.y[(t + j) * a.ldy + r + i] = s;
      }
    }
  }
};

template <class S>
struct KvRows {
  using V = typename S::V;
  static constexpr int kL = S::kLanes;

  // Two accumulators over pairs of vectors, then one vector, then a scalar tail.
  template <class L>
  static float dot(const float* q, const typename L::W* k, int64_t n) {
    V acc0 = S::zero(), acc1 = S::zero();
    int64_t i = 0;
    for (; i + 2 * kL <= n; i += 2 * kL) {
      acc0 = S::fma(S::load(q + i), L::load(k + i), acc0);
      acc1 = S::fma(S::load(q + i + kL), L::load(k + i + kL), acc1);
    }
    for (; i + kL <= n; i += kL) acc0 = S::fma(S::load(q + i), L::load(k + i), acc0);
    float s = S::sum(S::add(acc0, acc1));
    for (; i < n; ++i) s += q[i] * L::at(k, i);
    return s;
  }

  // y += a * v
  template <class L>
  static void axpy(float a, const typename L::W* v, float* y, int64_t n) {
    const V va = S::splat(a);
    int64_t i = 0;
    for (; i + kL <= n; i += kL) S::store(y + i, S::fma(va, L::load(v + i), S::load(y + i)));
    for (; i < n; ++i) y[i] += a * L::at(v, i);
  }

  static float dot_kv_f32(const float* q, const void* kv, int64_t n) {
    return dot<LoadF32<S>>(q, static_cast<const float*>(kv), n);
  }
  static float dot_kv_f16(const float* q, const void* kv, int64_t n) {
    return dot<LoadF16<S>>(q, static_cast<const uint16_t*>(kv), n);
  }
  static void axpy_kv_f32(float a, const void* v, float* y, int64_t n) {
    axpy<LoadF32<S>>(a, static_cast<const float*>(v), y, n);
  }
  static void axpy_kv_f16(float a, const void* v, float* y, int64_t n) {
    axpy<LoadF16<S>>(a, static_cast<const uint16_t*>(v), y, n);
  }
};

}  // namespace
}  // namespace edgelm::kernels
