// Scalar reference of the matrix product and the KV helpers: the oracle for
// every SIMD kernel, and the fallback for types or CPUs without one.
//
// Each dot product is the integer dot product of ggml's vec_dot for the pair
// (weight format, activation format): per block, an exact int32 sum of
// quant products, scaled once by the product of the block scales. So the
// only rounding is in the float accumulation across blocks, and a SIMD kernel
// that sums the same integers agrees with this to float rounding.

#include <cstring>

#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/fp16.h"
#include "kernels/kquant_scales.h"
#include "kernels/reference.h"

namespace edgelm::kernels {
namespace {

using fp::half_to_float;

// ---- float weights: f32 activations ----------------------------------------

float dot_f32(const float* w, const float* x, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += w[i] * x[i];
  return s;
}

float dot_f16(const uint16_t* w, const float* x, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += half_to_float(w[i]) * x[i];
  return s;
}

float dot_bf16(const uint16_t* w, const float* x, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += fp::bf16_to_float(w[i]) * x[i];
  return s;
}

// ---- 32-element formats ---------------------------------------------------------

// sum((q - 8) * xq) * dw * dx per block.
float dot_q4_0(const BlockQ4_0* w, const BlockQ8_0* x, int64_t n) {
  float s = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      isum += ((w[b].qs[j] & 0xf) - 8) * x[b].qs[j];
      isum += ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + kQK / 2];
    }
    s += static_cast<float>(isum) * (half_to_float(w[b].d) * half_to_float(x[b].d));
  }
  return s;
}

// sum(q * xq) * dw * dx + m * s per block, where the activation's s = dx * sum(xq).
float dot_q4_1(const BlockQ4_1* w, const BlockQ8_1* x, int64_t n) {
  float s = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      isum += (w[b].qs[j] & 0xf) * x[b].qs[j];
      isum += (w[b].qs[j] >> 4) * x[b].qs[j + kQK / 2];
    }
    s += static_cast<float>(isum) * (half_to_float(w[b].d) * half_to_float(x[b].d)) +
         half_to_float(w[b].m) * half_to_float(x[b].s);
  }
  return s;
}

float dot_q5_0(const BlockQ5_0* w, const BlockQ8_0* x, int64_t n) {
  float s = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    uint32_t qh;
    std::memcpy(&qh, w[b].qh, 4);
    int isum = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = (w[b].qs[j] & 0xf) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int q1 = (w[b].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      isum += (q0 - 16) * x[b].qs[j] + (q1 - 16) * x[b].qs[j + kQK / 2];
    }
    s += static_cast<float>(isum) * (half_to_float(w[b].d) * half_to_float(x[b].d));
  }
  return s;
}

float dot_q5_1(const BlockQ5_1* w, const BlockQ8_1* x, int64_t n) {
  float s = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    uint32_t qh;
    std::memcpy(&qh, w[b].qh, 4);
    int isum = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = (w[b].qs[j] & 0xf) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int q1 = (w[b].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      isum += q0 * x[b].qs[j] + q1 * x[b].qs[j + kQK / 2];
    }
    s += static_cast<float>(isum) * (half_to_float(w[b].d) * half_to_float(x[b].d)) +
         half_to_float(w[b].m) * half_to_float(x[b].s);
  }
  return s;
}

float dot_q8_0(const BlockQ8_0* w, const BlockQ8_0* x, int64_t n) {
  float s = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK; ++j) isum += w[b].qs[j] * x[b].qs[j];
    s += static_cast<float>(isum) * (half_to_float(w[b].d) * half_to_float(x[b].d));
  }
  return s;
}

// ---- K formats (activations Q8_K) ----------------------------------------------
// Per super-block: isum = sum_j scale_j * sum(q * xq) over sub-block j, and for
// the affine formats summs = sum_j min_j * (sum of xq over sub-block j), taken
// from the activation's bsums. Result: dw * dx * isum - dmin * dx * summs.

float dot_q2_k(const BlockQ2_K* w, const BlockQ8_K* x, int64_t n) {
  float s = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int isum = 0, summs = 0;
    for (int j = 0; j < 16; ++j) summs += (w[b].scales[j] >> 4) * x[b].bsums[j];
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, k = (e / 32) % 4, l = e % 32;
      const int q = (w[b].qs[32 * h + l] >> (2 * k)) & 3;
      isum += (w[b].scales[e / 16] & 0xf) * q * x[b].qs[e];
    }
    const float dall = x[b].d * half_to_float(w[b].d);
    const float dmin = x[b].d * half_to_float(w[b].dmin);
    s += dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  return s;
}

float dot_q3_k(const BlockQ3_K* w, const BlockQ8_K* x, int64_t n) {
  float s = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int8_t sc[16];
    unpack_q3k_scales(w[b].scales, sc);
    int isum = 0;
    for (int j = 0; j < 16; ++j) {
      int sub = 0;
      for (int e = 16 * j; e < 16 * j + 16; ++e) {
        const int h = e / 128, k = (e / 32) % 4, l = e % 32;
        const int low = (w[b].qs[32 * h + l] >> (2 * k)) & 3;
        const int high = (w[b].hmask[l] >> (4 * h + k)) & 1;
        sub += (low - (high ? 0 : 4)) * x[b].qs[e];
      }
      isum += sc[j] * sub;
    }
    s += x[b].d * half_to_float(w[b].d) * static_cast<float>(isum);
  }
  return s;
}

// Shared by Q4_K and Q5_K: `q` holds the 256 unpacked quants.
float finish_q45k(const uint8_t* scales, uint16_t d, uint16_t dmin, const uint8_t* q,
                  const BlockQ8_K& x) {
  uint8_t sc[8], mn[8];
  unpack_q4k_scales(scales, sc, mn);
  int isum = 0, summs = 0;
  for (int j = 0; j < 8; ++j) {
    int sub = 0;
    for (int l = 0; l < 32; ++l) sub += q[32 * j + l] * x.qs[32 * j + l];
    isum += sc[j] * sub;
    summs += mn[j] * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
  }
  return x.d * half_to_float(d) * static_cast<float>(isum) -
         x.d * half_to_float(dmin) * static_cast<float>(summs);
}

float dot_q4_k(const BlockQ4_K* w, const BlockQ8_K* x, int64_t n) {
  float s = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    uint8_t q[kQK_K];
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        q[64 * j + l] = w[b].qs[32 * j + l] & 0xf;
        q[64 * j + 32 + l] = w[b].qs[32 * j + l] >> 4;
      }
    }
    s += finish_q45k(w[b].scales, w[b].d, w[b].dmin, q, x[b]);
  }
  return s;
}

float dot_q5_k(const BlockQ5_K* w, const BlockQ8_K* x, int64_t n) {
  float s = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    uint8_t q[kQK_K];
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        const int hi0 = (w[b].qh[l] >> (2 * j)) & 1, hi1 = (w[b].qh[l] >> (2 * j + 1)) & 1;
        q[64 * j + l] = static_cast<uint8_t>((w[b].qs[32 * j + l] & 0xf) | (hi0 << 4));
        q[64 * j + 32 + l] = static_cast<uint8_t>((w[b].qs[32 * j + l] >> 4) | (hi1 << 4));
      }
    }
    s += finish_q45k(w[b].scales, w[b].d, w[b].dmin, q, x[b]);
  }
  return s;
}

float dot_q6_k(const BlockQ6_K* w, const BlockQ8_K* x, int64_t n) {
  float s = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    int isum = 0;
    for (int j = 0; j < 16; ++j) {
      int sub = 0;
      for (int e = 16 * j; e < 16 * j + 16; ++e) {
        const int h = e / 128, k = (e / 32) % 4, l = e % 32;
        const uint8_t ql = w[b].ql[64 * h + 32 * (k % 2) + l];
        const uint8_t qh = w[b].qh[32 * h + l];
        const int q = (((ql >> (4 * (k / 2))) & 0xf) | (((qh >> (2 * k)) & 3) << 4)) - 32;
        sub += q * x[b].qs[e];
      }
      isum += w[b].scales[j] * sub;
    }
    s += x[b].d * half_to_float(w[b].d) * static_cast<float>(isum);
  }
  return s;
}

// One row-by-row loop for every format: W row r against activation row t.
template <class WB, class XB, float (*Dot)(const WB*, const XB*, int64_t)>
void gemm_rows(const GemmArgs& a, int64_t r0, int64_t r1) {
  const auto* w = static_cast<const uint8_t*>(a.w);
  const auto* x = static_cast<const uint8_t*>(a.x);
  for (int64_t t = 0; t < a.n_tok; ++t) {
    const auto* xt = reinterpret_cast<const XB*>(x + t * a.x_stride);
    for (int64_t r = r0; r < r1; ++r) {
      a.y[t * a.ldy + r] = Dot(reinterpret_cast<const WB*>(w + r * a.w_stride), xt, a.n);
    }
  }
}

// ---- activation quantizers ---------------------------------------------------------

void quant_q8_0(const float* x, void* dst, int64_t n) {
  ref::quantize_q8_0(x, static_cast<BlockQ8_0*>(dst), n);
}
void quant_q8_1(const float* x, void* dst, int64_t n) {
  ref::quantize_q8_1(x, static_cast<BlockQ8_1*>(dst), n);
}
void quant_q8_k(const float* x, void* dst, int64_t n) {
  ref::quantize_q8_k(x, static_cast<BlockQ8_K*>(dst), n);
}

// ---- KV rows -------------------------------------------------------------------------

float dot_kv_f32(const float* q, const void* k, int64_t n) {
  return dot_f32(static_cast<const float*>(k), q, n);
}
float dot_kv_f16(const float* q, const void* k, int64_t n) {
  return dot_f16(static_cast<const uint16_t*>(k), q, n);
}
// Per block: d * sum(q * k), the float sum over the block's 32 products.
float dot_kv_q8_0(const float* q, const void* k, int64_t n) {
  const auto* kb = static_cast<const BlockQ8_0*>(k);
  float s = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b, q += kQK) {
    float bs = 0.0f;
    for (int j = 0; j < kQK; ++j) bs += q[j] * static_cast<float>(kb[b].qs[j]);
    s += bs * half_to_float(kb[b].d);
  }
  return s;
}

void axpy_kv_f32(float a, const void* v, float* y, int64_t n) {
  const auto* vf = static_cast<const float*>(v);
  for (int64_t i = 0; i < n; ++i) y[i] += a * vf[i];
}
void axpy_kv_f16(float a, const void* v, float* y, int64_t n) {
  const auto* vh = static_cast<const uint16_t*>(v);
  for (int64_t i = 0; i < n; ++i) y[i] += a * half_to_float(vh[i]);
}
// y += (a * d) * q per block.
void axpy_kv_q8_0(float a, const void* v, float* y, int64_t n) {
  const auto* vb = static_cast<const BlockQ8_0*>(v);
  for (int64_t b = 0; b < n / kQK; ++b, y += kQK) {
    const float ad = a * half_to_float(vb[b].d);
    for (int j = 0; j < kQK; ++j) y[j] += ad * static_cast<float>(vb[b].qs[j]);
  }
}

Backend make_scalar_backend() {
  Backend be;
  auto set = [&](DType t, GemmFn f) { be.gemm[static_cast<int>(t)] = f; };
  set(DType::F32, gemm_rows<float, float, dot_f32>);
  set(DType::F16, gemm_rows<uint16_t, float, dot_f16>);
  set(DType::BF16, gemm_rows<uint16_t, float, dot_bf16>);
  set(DType::Q4_0, gemm_rows<BlockQ4_0, BlockQ8_0, dot_q4_0>);
  set(DType::Q4_1, gemm_rows<BlockQ4_1, BlockQ8_1, dot_q4_1>);
  set(DType::Q5_0, gemm_rows<BlockQ5_0, BlockQ8_0, dot_q5_0>);
  set(DType::Q5_1, gemm_rows<BlockQ5_1, BlockQ8_1, dot_q5_1>);
  set(DType::Q8_0, gemm_rows<BlockQ8_0, BlockQ8_0, dot_q8_0>);
  set(DType::Q2_K, gemm_rows<BlockQ2_K, BlockQ8_K, dot_q2_k>);
  set(DType::Q3_K, gemm_rows<BlockQ3_K, BlockQ8_K, dot_q3_k>);
  set(DType::Q4_K, gemm_rows<BlockQ4_K, BlockQ8_K, dot_q4_k>);
  set(DType::Q5_K, gemm_rows<BlockQ5_K, BlockQ8_K, dot_q5_k>);
  set(DType::Q6_K, gemm_rows<BlockQ6_K, BlockQ8_K, dot_q6_k>);
  register_interleaved_scalar(be);
  register_attn_scalar(be);
  be.quantize[act_slot(DType::Q8_0)] = quant_q8_0;
  be.quantize[act_slot(DType::Q8_1)] = quant_q8_1;
  be.quantize[act_slot(DType::Q8_K)] = quant_q8_k;
  be.dot_kv[kv_slot(DType::F32)] = dot_kv_f32;
  be.dot_kv[kv_slot(DType::F16)] = dot_kv_f16;
  be.dot_kv[kv_slot(DType::Q8_0)] = dot_kv_q8_0;
  be.axpy_kv[kv_slot(DType::F32)] = axpy_kv_f32;
  be.axpy_kv[kv_slot(DType::F16)] = axpy_kv_f16;
  be.axpy_kv[kv_slot(DType::Q8_0)] = axpy_kv_q8_0;
  return be;
}

}  // namespace

const Backend& scalar_backend() {
  static const Backend be = make_scalar_backend();
  return be;
}

}  // namespace edgelm::kernels
