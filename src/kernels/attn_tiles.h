// Internal: the attention tile kernels (kernels.h, "attention tiles") that
// every ISA shares: the loop nests over query rows, key rows and columns,
// and the softmax's exp (vec_math.h's). Written once over
//
//   a tile kernel K (attn_<isa>.cpp):
//     template <int NR, int NK, class E> static void score_tile(q, k, d, s, lds);
//       // scores of NR query rows against NK key rows
//     template <int NR, class E> static void accumulate_rows(p, ldp, v, nk, d, o);
//       // NR accumulator rows, all d columns
//     (E, the element type of the keys and values: float, or uint16_t for
//     F16 cache rows read in place, converted as they are loaded)
//     static float exp_sum(float* s, int n, float m);
//     static float max_of(const float* s, int n);
//     static void kv_f16(const void* src, float* dst, int64_t n);  // one row
//     static void kv_q8_0(const void* src, float* dst, int64_t n);
//     static constexpr int kRegisters;  // the ISA's vector registers: 32
//                                       // give score_rows 4-key tiles
//     (or, instead of score_tile and accumulate_rows, whole-tile
//     template <class E> scores(...) and accumulate(...) with kernels.h's
//     signatures: AVX-512's, whose tiles and score sums are its own)
//   and, for the parts that are the same arithmetic on every ISA, a vector
//   type S (F32x8 in simd_avx2.h, F32x4 in simd_neon.h, F32x16 in
//   simd_avx512.h): VecTiles<S> is the tile kernel of an ISA whose rows end
//   in a scalar tail (AVX2, NEON; AVX-512 masks the last vector instead).
//
// Per (query row, key row) one vector accumulator walks the row in order,
// so every tile shape rounds a score the same way.
//
// Internal linkage, as tile_driver.h: K and S are always types local to one
// translation unit, compiled with that ISA's flags.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/backend.h"
#include "kernels/fp16.h"
#include "kernels/vec_math.h"

namespace edgelm::kernels {
namespace {

// One key or value element as a float: f32 rows, or F16 cache rows. The
// scalar tails below multiply-add with std::fma (an instruction on every
// ISA that uses them: AVX2 is built with FMA, and NEON has it), so whether
// the compiler contracts a * b + c cannot differ between the f32 and the
// F16 instantiations.
inline float kv_elem(const float* p) { return *p; }
inline float kv_elem(const uint16_t* p) { return fp::half_to_float(*p); }

template <class S>
struct VecTiles {
  using V = typename S::V;
  static constexpr int L = S::kLanes;
  static constexpr int kRegisters = S::kRegisters;

  static V load_kv(const float* p) { return S::load(p); }
  static V load_kv(const uint16_t* p) { return S::load_f16(p); }

  template <int NR, int NK, class E>
  static void score_tile(const float* q, const E* k, int64_t d, float* s, int64_t lds) {
    V acc[NR][NK];
    EDGELM_UNROLL for (int i = 0; i < NR; ++i)
      EDGELM_UNROLL for (int j = 0; j < NK; ++j) acc[i][j] = S::zero();
    int64_t c = 0;
    for (; c + L <= d; c += L) {
      V kv[NK];
      EDGELM_UNROLL for (int j = 0; j < NK; ++j) kv[j] = load_kv(k + j * d + c);
      EDGELM_UNROLL for (int i = 0; i < NR; ++i) {
        const V qv = S::load(q + i * d + c);
        EDGELM_UNROLL for (int j = 0; j < NK; ++j) acc[i][j] = S::fma(qv, kv[j], acc[i][j]);
      }
    }
    // Where S has a sum4 (AVX2's: the same bits as four S::sum, in fewer
    // instructions), the NR x NK sums four at a time in row-major order;
    // else (NEON, whose sum is two instructions) one at a time.
    // Where S also has a sum8 (AVX2's, the same bits again), eight at a
    // time first.
    constexpr bool kSum4 = requires(V v, float* o) { S::sum4(v, v, v, v, o); };
    constexpr bool kSum8 = requires(const V(&a)[8], float* o) {
      S::sum8(a, o);
    };
    float r[NR * NK];
    if constexpr (kSum4) {
      constexpr int N8 = kSum8 ? NR * NK / 8 * 8 : 0;
      constexpr int N4 = NR * NK / 4 * 4;
      EDGELM_UNROLL for (int u = 0; u < N8; u += 8) {
        if constexpr (kSum8) {
          V a8[8];
          EDGELM_UNROLL for (int e = 0; e < 8; ++e) a8[e] = acc[(u + e) / NK][(u + e) % NK];
          S::sum8(a8, r + u);
        }
      }
      EDGELM_UNROLL for (int u = N8; u < N4; u += 4) {
        S::sum4(acc[u / NK][u % NK], acc[(u + 1) / NK][(u + 1) % NK], acc[(u + 2) / NK][(u + 2) % NK],
                acc[(u + 3) / NK][(u + 3) % NK], r + u);
      }
      EDGELM_UNROLL for (int u = N4; u < NR * NK; ++u) r[u] = S::sum(acc[u / NK][u % NK]);
    }
    EDGELM_UNROLL for (int i = 0; i < NR; ++i) {
      EDGELM_UNROLL for (int j = 0; j < NK; ++j) {
        float t = kSum4 ? r[i * NK + j] : S::sum(acc[i][j]);
        for (int64_t e = c; e < d; ++e) t = std::fma(q[i * d + e], kv_elem(k + j * d + e), t);
        s[i * lds + j] = t;
      }
    }
  }

  // NR accumulator rows, columns [c, c + L * NV) kept in registers over all
  // nk keys; row j of `ahead` requested beside value row j.
  template <int NR, int NV, class E>
  static void accumulate_cols(const float* p, int64_t ldp, const E* v, int nk, int64_t d, float* o,
                              int64_t c, const E* ahead, int n_ahead) {
    V a[NR][NV];
    EDGELM_UNROLL for (int i = 0; i < NR; ++i)
      EDGELM_UNROLL for (int u = 0; u < NV; ++u) a[i][u] = S::load(o + i * d + c + L * u);
    for (int j = 0; j < nk; ++j) {
      request_row(ahead, n_ahead, j, d);
      V vv[NV];
      EDGELM_UNROLL for (int u = 0; u < NV; ++u) vv[u] = load_kv(v + j * d + c + L * u);
      EDGELM_UNROLL for (int i = 0; i < NR; ++i) {
        const V w = S::splat(p[i * ldp + j]);
        EDGELM_UNROLL for (int u = 0; u < NV; ++u) a[i][u] = S::fma(w, vv[u], a[i][u]);
      }
    }
    EDGELM_UNROLL for (int i = 0; i < NR; ++i)
      EDGELM_UNROLL for (int u = 0; u < NV; ++u) S::store(o + i * d + c + L * u, a[i][u]);
  }

  // 16 columns at a time, then one vector, then a scalar tail. The first
  // pass over the keys requests `ahead`.
  template <int NR, class E>
  static void accumulate_rows(const float* p, int64_t ldp, const E* v, int nk, int64_t d, float* o,
                              const E* ahead, int n_ahead) {
    int64_t c = 0;
    for (; c + 16 <= d; c += 16, ahead = nullptr)
      accumulate_cols<NR, 16 / L, E>(p, ldp, v, nk, d, o, c, ahead, n_ahead);
    for (; c + L <= d; c += L, ahead = nullptr)
      accumulate_cols<NR, 1, E>(p, ldp, v, nk, d, o, c, ahead, n_ahead);
    if (ahead != nullptr)  // d < L: no pass above requested it
      for (int j = 0; j < nk; ++j) request_row(ahead, n_ahead, j, d);
    for (; c < d; ++c) {
      EDGELM_UNROLL for (int i = 0; i < NR; ++i) {
        float t = o[i * d + c];
        for (int j = 0; j < nk; ++j) t = std::fma(p[i * ldp + j], kv_elem(v + j * d + c), t);
        o[i * d + c] = t;
      }
    }
  }

  // A last partial vector is padded with -100, whose exp is flushed to 0.
  static float exp_sum(float* s, int n, float m) {
    const V mv = S::splat(m);
    V acc = S::zero();
    int j = 0;
    for (; j + L <= n; j += L) {
      const V e = exp_neg<S>(S::sub(S::load(s + j), mv));
      S::store(s + j, e);
      acc = S::add(acc, e);
    }
    if (j < n) {
      alignas(sizeof(V)) float t[L];
      for (int u = 0; u < L; ++u) t[u] = j + u < n ? s[j + u] - m : -100.0f;
      const V e = exp_neg<S>(S::load(t));
      S::store(t, e);
      for (int u = 0; j + u < n; ++u) s[j + u] = t[u];
      acc = S::add(acc, e);
    }
    return S::sum(acc);
  }

  // Two vector maxima (the loop's latency chain halved) over whole pairs of
  // vectors, then the rest one element at a time.
  static float max_of(const float* s, int n) {
    float m = s[0];
    int j = 1;
    if (n >= 2 * L) {
      V a = S::load(s), b = S::load(s + L);
      for (j = 2 * L; j + 2 * L <= n; j += 2 * L) {
        a = S::max(a, S::load(s + j));
        b = S::max(b, S::load(s + j + L));
      }
      m = S::max_lane(S::max(a, b));
    }
    for (; j < n; ++j) m = std::max(m, s[j]);
    return m;
  }
};

// Key rows 4 at a time for 4 or more query rows where the ISA has 32
// vector registers (NEON: 6 x 4 accumulators, 4 keys and a query vector
// are 29), else 2 at a time; then 2 and 1.
// Row j of `ahead` is requested before the tile with key row j.
template <class K, int NR, class E>
inline void score_rows(const float* q, const E* k, int nk, int64_t d, float* s, int64_t lds,
                       const E* ahead, int n_ahead) {
  int j = 0;
  if constexpr (K::kRegisters >= 32 && NR >= 4)
    for (; j + 4 <= nk; j += 4) {
      EDGELM_UNROLL for (int u = 0; u < 4; ++u) request_row(ahead, n_ahead, j + u, d);
      K::template score_tile<NR, 4, E>(q, k + j * d, d, s + j, lds);
    }
  for (; j + 2 <= nk; j += 2) {
    EDGELM_UNROLL for (int u = 0; u < 2; ++u) request_row(ahead, n_ahead, j + u, d);
    K::template score_tile<NR, 2, E>(q, k + j * d, d, s + j, lds);
  }
  if (j < nk) {
    request_row(ahead, n_ahead, j, d);
    K::template score_tile<NR, 1, E>(q, k + j * d, d, s + j, lds);
  }
}

// Tiles of 6, 4, 2 and 1 query rows by score_rows' key rows. Six rows (a
// Qwen2 GQA group: a decode step's whole tile) load each key vector once
// for the group; 6 x 2 accumulators, 2 keys and a query vector fit AVX2's
// 16 registers. The first pass over the keys requests `ahead`.
template <class K, class E>
void tile_scores(const float* q, int nq, const E* k, int nk, int64_t d, float* s, int64_t lds,
                 const E* ahead, int n_ahead) {
  int i = 0;
  for (; i + 6 <= nq; i += 6, ahead = nullptr)
    score_rows<K, 6, E>(q + i * d, k, nk, d, s + i * lds, lds, ahead, n_ahead);
  for (; i + 4 <= nq; i += 4, ahead = nullptr)
    score_rows<K, 4, E>(q + i * d, k, nk, d, s + i * lds, lds, ahead, n_ahead);
  for (; i + 2 <= nq; i += 2, ahead = nullptr)
    score_rows<K, 2, E>(q + i * d, k, nk, d, s + i * lds, lds, ahead, n_ahead);
  if (i < nq) score_rows<K, 1, E>(q + i * d, k, nk, d, s + i * lds, lds, ahead, n_ahead);
}

// Six rows (12 accumulators of 8 lanes on AVX2, 24 of 4 on NEON) load each
// value vector once for a GQA group of six; then 4, 2 and 1.
template <class K, class E>
void tile_accumulate(const float* p, int64_t ldp, int nq, const E* v, int nk, int64_t d, float* o,
                     const E* ahead, int n_ahead) {
  int i = 0;
  for (; i + 6 <= nq; i += 6, ahead = nullptr)
    K::template accumulate_rows<6, E>(p + i * ldp, ldp, v, nk, d, o + i * d, ahead, n_ahead);
  for (; i + 4 <= nq; i += 4, ahead = nullptr)
    K::template accumulate_rows<4, E>(p + i * ldp, ldp, v, nk, d, o + i * d, ahead, n_ahead);
  for (; i + 2 <= nq; i += 2, ahead = nullptr)
    K::template accumulate_rows<2, E>(p + i * ldp, ldp, v, nk, d, o + i * d, ahead, n_ahead);
  if (i < nq)
    K::template accumulate_rows<1, E>(p + i * ldp, ldp, v, nk, d, o + i * d, ahead, n_ahead);
}

// The f32 entry points (rows converted into scratch, already in cache)
// take no `ahead`.
template <auto Scores>
void scores_here(const float* q, int nq, const float* k, int nk, int64_t d, float* s, int64_t lds) {
  Scores(q, nq, k, nk, d, s, lds, nullptr, 0);
}
template <auto Accumulate>
void accumulate_here(const float* p, int64_t ldp, int nq, const float* v, int nk, int64_t d,
                     float* o) {
  Accumulate(p, ldp, nq, v, nk, d, o, nullptr, 0);
}

inline void kv_copy_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

// A tile kernel with whole-tile entry points of its own (K::scores<E>,
// K::accumulate<E>: AVX-512's) registers those; the others get this
// file's loop nests over K::score_tile and K::accumulate_rows.
template <class K>
void register_attn(Backend& be) {
  be.kv_to_f32[kv_slot(DType::F32)] = kv_rows<kv_copy_f32>;
  be.kv_to_f32[kv_slot(DType::F16)] = kv_rows<K::kv_f16>;
  be.kv_to_f32[kv_slot(DType::Q8_0)] = kv_rows<K::kv_q8_0>;
  if constexpr (requires { &K::template scores<float>; }) {
    be.attn_scores = scores_here<K::template scores<float>>;
    be.attn_accumulate = accumulate_here<K::template accumulate<float>>;
    be.attn_scores_f16 = K::template scores<uint16_t>;
    be.attn_accumulate_f16 = K::template accumulate<uint16_t>;
  } else {
    be.attn_scores = scores_here<tile_scores<K, float>>;
    be.attn_accumulate = accumulate_here<tile_accumulate<K, float>>;
    be.attn_scores_f16 = tile_scores<K, uint16_t>;
    be.attn_accumulate_f16 = tile_accumulate<K, uint16_t>;
  }
  be.attn_exp_sum = K::exp_sum;
  be.attn_max = K::max_of;
}

}  // namespace
}  // namespace edgelm::kernels
