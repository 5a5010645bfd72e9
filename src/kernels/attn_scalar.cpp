// Scalar reference of the attention tile kernels (kernels.h, "attention
// tiles") and of the element-wise ones: the oracle the SIMD versions are
// tested against.

#include <algorithm>
#include <cmath>

#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/fp16.h"

namespace edgelm::kernels {
namespace {

inline void kv_f32(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const float*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = s[i];
}

inline void kv_f16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp::half_to_float(h[i]);
}

inline void kv_q8_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t k = 0; k < n / kQK; ++k) {
    const float d = fp::half_to_float(b[k].d);
    for (int j = 0; j < kQK; ++j) dst[k * kQK + j] = static_cast<float>(b[k].qs[j]) * d;
  }
}

inline float elem(const float* p) { return *p; }
inline float elem(const uint16_t* p) { return fp::half_to_float(*p); }

template <class E>
void scores(const float* q, int nq, const E* k, int nk, int64_t d, float* s, int64_t lds) {
  for (int i = 0; i < nq; ++i) {
    for (int j = 0; j < nk; ++j) {
      float sum = 0.0f;
      for (int64_t c = 0; c < d; ++c) sum += q[i * d + c] * elem(k + j * d + c);
      s[i * lds + j] = sum;
    }
  }
}

template <class E>
void accumulate(const float* p, int64_t ldp, int nq, const E* v, int nk, int64_t d, float* o) {
  for (int i = 0; i < nq; ++i) {
    float* oi = o + i * d;
    for (int j = 0; j < nk; ++j) {
      const float w = p[i * ldp + j];
      for (int64_t c = 0; c < d; ++c) oi[c] += w * elem(v + j * d + c);
    }
  }
}

float exp_sum(float* s, int n, float m) {
  float sum = 0.0f;
  for (int j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - m);
    sum += s[j];
  }
  return sum;
}

float max_of(const float* s, int n) {
  float m = s[0];
  for (int j = 1; j < n; ++j) m = std::max(m, s[j]);
  return m;
}

// The element-wise references (kernels.h, "element-wise").
void silu_mul(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void rope(float* x, int n_heads, int head_dim, const float* table, int rope_dim, bool neox) {
  const int half = rope_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<size_t>(h) * static_cast<size_t>(head_dim);
    for (int i = 0; i < half; ++i) {
      const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
      const float c = neox ? table[i] : table[2 * i], s = neox ? table[half + i] : table[2 * i + 1];
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * c - x1 * s;
      v[b] = x0 * s + x1 * c;
    }
  }
}

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps);
  if (w) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
  }
}

}  // namespace

void register_attn_scalar(Backend& be) {
  be.kv_to_f32[kv_slot(DType::F32)] = kv_rows<kv_f32>;
  be.kv_to_f32[kv_slot(DType::F16)] = kv_rows<kv_f16>;
  be.kv_to_f32[kv_slot(DType::Q8_0)] = kv_rows<kv_q8_0>;
  be.attn_scores = scores<float>;
  be.attn_accumulate = accumulate<float>;
  be.attn_scores_f16 = [](const float* q, int nq, const uint16_t* k, int nk, int64_t d, float* s,
                          int64_t lds, const uint16_t*,
                          int) { scores<uint16_t>(q, nq, k, nk, d, s, lds); };
  be.attn_accumulate_f16 = [](const float* p, int64_t ldp, int nq, const uint16_t* v, int nk,
                              int64_t d, float* o, const uint16_t*,
                              int) { accumulate<uint16_t>(p, ldp, nq, v, nk, d, o); };
  be.attn_exp_sum = exp_sum;
  be.attn_max = max_of;
  be.silu_mul = silu_mul;
  be.rms_norm = rms_norm;
  be.rope = rope;
}

}  // namespace edgelm::kernels
