// Internal: float math written once over a vector type S (F32x8 in
// simd_avx2.h, F32x4 in simd_neon.h, F32x16 in simd_avx512.h for the parts
// it has): exp for the attention softmax, and the element-wise kernels
// (kernels.h, "element-wise") that run between the matrix products.
//
// Internal linkage, as attn_tiles.h: S is always a type local to one
// translation unit, compiled with that ISA's flags.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/backend.h"

namespace edgelm::kernels {
namespace {

// exp(x) for x <= 0: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two so
// n ln2 is exact enough), e^r by its Taylor polynomial to r^6 (truncation
// about 1.2e-7 relative), times 2^n. Below -87.3 (2^-126) the result is 0.
template <class S>
inline typename S::V exp_neg(typename S::V x) {
  using V = typename S::V;
  const V n = S::round(S::mul(x, S::splat(1.44269504088896341f)));
  V r = S::fnma(n, S::splat(0.693145751953125f), x);
  r = S::fnma(n, S::splat(1.428606765330187e-06f), r);
  V p = S::splat(1.0f / 720);
  p = S::fma(p, r, S::splat(1.0f / 120));
  p = S::fma(p, r, S::splat(1.0f / 24));
  p = S::fma(p, r, S::splat(1.0f / 6));
  p = S::fma(p, r, S::splat(0.5f));
  p = S::fma(p, r, S::splat(1.0f));
  p = S::fma(p, r, S::splat(1.0f));
  return S::keep_ge(S::scale_pow2(p, n), x, -87.3f);
}

// The element-wise kernels over S, with a scalar tail for the elements past
// the last whole vector.
template <class S>
struct VecElementwise {
  using V = typename S::V;
  static constexpr int L = S::kLanes;

  // silu(g) = g * sigmoid(g). sigmoid from e = exp(-|g|), which never
  // overflows: 1 / (1 + e) for g >= 0, e / (1 + e) for g < 0.
  static V silu(V g) {
    const V e = exp_neg<S>(S::neg_abs(g));
    const V one = S::splat(1.0f);
    const V sig = S::div(S::if_neg(g, e, one), S::add(one, e));
    return S::mul(g, sig);
  }

  static void silu_mul(float* g, const float* u, int64_t n) {
    int64_t i = 0;
    for (; i + 2 * L <= n; i += 2 * L) {
      const V a = silu(S::load(g + i)), b = silu(S::load(g + i + L));
      S::store(g + i, S::mul(a, S::load(u + i)));
      S::store(g + i + L, S::mul(b, S::load(u + i + L)));
    }
    for (; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }

  // Sum of squares in four vector accumulators (the scalar reference sums in
  // double; the difference is a few ulp of the scale).
  static void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
    V acc[4] = {S::zero(), S::zero(), S::zero(), S::zero()};
    int64_t i = 0;
    for (; i + 4 * L <= n; i += 4 * L) {
      EDGELM_UNROLL for (int u = 0; u < 4; ++u) {
        const V v = S::load(x + i + u * L);
        acc[u] = S::fma(v, v, acc[u]);
      }
    }
    for (; i + L <= n; i += L) {
      const V v = S::load(x + i);
      acc[0] = S::fma(v, v, acc[0]);
    }
    float ss = S::sum(S::add(S::add(acc[0], acc[1]), S::add(acc[2], acc[3])));
    for (; i < n; ++i) ss += x[i] * x[i];
    const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
    const V sv = S::splat(scale);
    i = 0;
    if (w) {
      for (; i + L <= n; i += L) S::store(y + i, S::mul(S::mul(S::load(x + i), sv), S::load(w + i)));
      for (; i < n; ++i) y[i] = x[i] * scale * w[i];
    } else {
      for (; i + L <= n; i += L) S::store(y + i, S::mul(S::load(x + i), sv));
      for (; i < n; ++i) y[i] = x[i] * scale;
    }
  }

  // The scalar reference's rotation (kernels.h, rope). NeoX: the two halves
  // of the rotated dims are two runs of vectors, as are the cosines and the
  // sines. Original layout: a vector holds kLanes/2 pairs and the table's
  // (cos, sin) pairs line up with them; with c and s duplicated across each
  // pair and the pair swapped, x' = x c -/+ swap(x) s (minus on the first
  // of a pair, plus on the second).
  static void rope(float* x, int n_heads, int head_dim, const float* t, int rope_dim, bool neox) {
    const int half = rope_dim / 2;
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + static_cast<size_t>(h) * static_cast<size_t>(head_dim);
      int i = 0;
      if (neox) {
        for (; i + L <= half; i += L) {
          const V c = S::load(t + i), s = S::load(t + half + i);
          const V a = S::load(v + i), b = S::load(v + half + i);
          S::store(v + i, S::fnma(b, s, S::mul(a, c)));
          S::store(v + half + i, S::fma(b, c, S::mul(a, s)));
        }
        for (; i < half; ++i) {
          const float c = t[i], s = t[half + i], x0 = v[i], x1 = v[half + i];
          v[i] = x0 * c - x1 * s;
          v[half + i] = x0 * s + x1 * c;
        }
      } else {
        for (; 2 * i + L <= 2 * half; i += L / 2) {
          const V tv = S::load(t + 2 * i), xv = S::load(v + 2 * i);
          S::store(v + 2 * i, S::sub_add(S::mul(xv, S::dup_even(tv)), S::mul(S::swap_pairs(xv), S::dup_odd(tv))));
        }
        for (; i < half; ++i) {
          const float c = t[2 * i], s = t[2 * i + 1], x0 = v[2 * i], x1 = v[2 * i + 1];
          v[2 * i] = x0 * c - x1 * s;
          v[2 * i + 1] = x0 * s + x1 * c;
        }
      }
    }
  }
};

template <class S>
void register_elementwise(Backend& be) {
  be.silu_mul = VecElementwise<S>::silu_mul;
  be.rms_norm = VecElementwise<S>::rms_norm;
  be.rope = VecElementwise<S>::rope;
}

}  // namespace
}  // namespace edgelm::kernels
