// Scalar reference (de)quantization of the 256-element K formats Q2_K ... Q6_K
// and the activation format Q8_K. Layouts: blocks.h.
//
// The weight quantizers fit each sub-block with a small search (a handful of
// candidate scales, each refined by least squares), then quantize the
// sub-block scales against one f16 super-scale and requantize the values with
// the scales actually stored. That is far simpler than llama-quantize's
// importance-weighted search and a little less accurate, which is fine for
// tests and synthetic models.

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/fp16.h"
#include "kernels/kquant_scales.h"
#include "kernels/reference.h"

namespace edgelm::kernels::ref {
namespace {

using fp::float_to_half;
using fp::half_to_float;

int round_int(float v) {
  return static_cast<int>(std::lrint(v));
}

// Round to nearest, ties to even, for |v| < 2^22: adding 1.5 * 2^23 leaves the
// integer in the low mantissa bits. Same result as the SIMD conversions.
int nearest_int(float v) {
  const float f = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &f, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// x ~= scale * q - min with q in [0, nmax] and min >= 0 (so zero is always
// representable). Returns {scale, min}.
struct Affine {
  float scale;
  float min;
};

float affine_error(const float* x, int n, int nmax, float scale, float lo) {
  float err = 0.0f;
  const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
  for (int i = 0; i < n; ++i) {
    const int q = std::clamp(round_int((x[i] - lo) * inv), 0, nmax);
    const float e = scale * static_cast<float>(q) + lo - x[i];
    err += e * e;
  }
  return err;
}

Affine fit_affine(const float* x, int n, int nmax) {
  float lo = 0.0f, hi = x[0];
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  if (hi <= lo) return {0.0f, -lo};
  float best_scale = (hi - lo) / static_cast<float>(nmax), best_lo = lo;
  float best_err = affine_error(x, n, nmax, best_scale, best_lo);
  // Candidate step counts around nmax; for each, assign quants and refit
  // (scale, lo) by least squares on those quants.
  for (int k = -2; k <= 6; ++k) {
    const float scale = (hi - lo) / (static_cast<float>(nmax) + 0.25f * static_cast<float>(k));
    double sq = 0, sq2 = 0, sx = 0, sqx = 0;
    for (int i = 0; i < n; ++i) {
      const int q = std::clamp(round_int((x[i] - lo) / scale), 0, nmax);
      sq += q;
      sq2 += static_cast<double>(q) * q;
      sx += x[i];
      sqx += static_cast<double>(q) * x[i];
    }
    const double det = sq2 * n - sq * sq;
    if (det <= 0) continue;
    double s = (sqx * n - sq * sx) / det;
    double l = (sq2 * sx - sq * sqx) / det;
    if (l > 0) {  // the minimum must stay <= 0
      l = 0;
      s = sqx / sq2;
    }
    if (s <= 0) continue;
    const float err = affine_error(x, n, nmax, static_cast<float>(s), static_cast<float>(l));
    if (err < best_err) {
      best_err = err;
      best_scale = static_cast<float>(s);
      best_lo = static_cast<float>(l);
    }
  }
  return {best_scale, -best_lo};
}

// x ~= scale * q with q in [-(qmax + 1), qmax]. The scale may be negative: the
// element of largest magnitude goes to the most negative quant.
float symmetric_error(const float* x, int n, int qmax, float scale) {
  const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
  float err = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int q = std::clamp(round_int(x[i] * inv), -qmax - 1, qmax);
    const float e = scale * static_cast<float>(q) - x[i];
    err += e * e;
  }
  return err;
}

float fit_symmetric(const float* x, int n, int qmax) {
  float amax = 0.0f, m = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      m = x[i];
    }
  }
  if (amax == 0.0f) return 0.0f;
  const float qmin = static_cast<float>(-qmax - 1);
  float best = m / qmin, best_err = symmetric_error(x, n, qmax, best);
  for (int k = -4; k <= 6; ++k) {
    const float scale = m / (qmin + 0.1f * static_cast<float>(k));
    const float inv = 1.0f / scale;
    double sqx = 0, sq2 = 0;
    for (int i = 0; i < n; ++i) {
      const int q = std::clamp(round_int(x[i] * inv), -qmax - 1, qmax);
      sqx += static_cast<double>(q) * x[i];
      sq2 += static_cast<double>(q) * q;
    }
    if (sq2 == 0) continue;
    const float s = static_cast<float>(sqx / sq2);
    const float err = symmetric_error(x, n, qmax, s);
    if (err < best_err) {
      best_err = err;
      best = s;
    }
  }
  return best;
}

// Sub-block scales/mins (all >= 0) -> `levels`-step integers against one f16
// super-scale each. Returns the stored f16 super-scales.
void quantize_scales(const float* v, int count, int levels, uint16_t* super, uint8_t* out) {
  float vmax = 0.0f;
  for (int j = 0; j < count; ++j) vmax = std::max(vmax, v[j]);
  *super = float_to_half(vmax / static_cast<float>(levels));
  const float d = half_to_float(*super);
  for (int j = 0; j < count; ++j)
    out[j] = d > 0.0f ? static_cast<uint8_t>(std::clamp(round_int(v[j] / d), 0, levels)) : 0;
}

// Quants of an affine sub-block given its stored scale and min.
void requantize_affine(const float* x, int n, int nmax, float ds, float dm, uint8_t* q) {
  const float inv = ds > 0.0f ? 1.0f / ds : 0.0f;
  for (int i = 0; i < n; ++i)
    q[i] = static_cast<uint8_t>(std::clamp(round_int((x[i] + dm) * inv), 0, nmax));
}

// Signed sub-block scales -> integers in [-(qmax + 1), qmax] against one f32
// super-scale: the scale of largest magnitude maps to -(qmax + 1).
float quantize_signed_scales(const float* s, int count, int qmax, int* out) {
  float amax = 0.0f, m = 0.0f;
  for (int j = 0; j < count; ++j) {
    if (std::fabs(s[j]) > amax) {
      amax = std::fabs(s[j]);
      m = s[j];
    }
  }
  if (amax == 0.0f) {
    for (int j = 0; j < count; ++j) out[j] = 0;
    return 0.0f;
  }
  const float iscale = static_cast<float>(-qmax - 1) / m;
  for (int j = 0; j < count; ++j) out[j] = std::clamp(round_int(iscale * s[j]), -qmax - 1, qmax);
  return 1.0f / iscale;
}

// Q4_K and Q5_K share everything but the width of the quants: fills scales,
// d, dmin and returns the quants (0..nmax) of the 256 elements in L.
void quantize_q45k_superblock(const float* x, int nmax, uint8_t scales[12], uint16_t* d,
                              uint16_t* dmin, uint8_t L[kQK_K]) {
  float sub_scale[8], sub_min[8];
  for (int j = 0; j < 8; ++j) {
    const Affine f = fit_affine(x + 32 * j, 32, nmax);
    sub_scale[j] = f.scale;
    sub_min[j] = f.min;
  }
  uint8_t sc[8], mn[8];
  quantize_scales(sub_scale, 8, 63, d, sc);
  quantize_scales(sub_min, 8, 63, dmin, mn);
  pack_q4k_scales(sc, mn, scales);
  const float df = half_to_float(*d), dminf = half_to_float(*dmin);
  for (int j = 0; j < 8; ++j) {
    requantize_affine(x + 32 * j, 32, nmax, df * sc[j], dminf * mn[j], L + 32 * j);
  }
}

}  // namespace

// ---- dequantization: ggml's formulas --------------------------------------

void dequantize_q2_k(const BlockQ2_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = half_to_float(x[i].d);
    const float dmin = half_to_float(x[i].dmin);
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, k = (e / 32) % 4, l = e % 32;
      const uint8_t sc = x[i].scales[e / 16];
      const int q = (x[i].qs[32 * h + l] >> (2 * k)) & 3;
      const float dl = d * static_cast<float>(sc & 0xf);
      const float ml = dmin * static_cast<float>(sc >> 4);
      y[e] = dl * static_cast<float>(q) - ml;
    }
  }
}

void dequantize_q3_k(const BlockQ3_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = half_to_float(x[i].d);
    int8_t sc[16];
    unpack_q3k_scales(x[i].scales, sc);
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, k = (e / 32) % 4, l = e % 32;
      const int low = (x[i].qs[32 * h + l] >> (2 * k)) & 3;
      const int high = (x[i].hmask[l] >> (4 * h + k)) & 1;
      const float dl = d * static_cast<float>(sc[e / 16]);
      y[e] = dl * static_cast<float>(low - (high ? 0 : 4));
    }
  }
}

void dequantize_q4_k(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = half_to_float(x[i].d);
    const float dmin = half_to_float(x[i].dmin);
    uint8_t sc[8], mn[8];
    unpack_q4k_scales(x[i].scales, sc, mn);
    for (int j = 0; j < 8; ++j) {
      const float dl = d * static_cast<float>(sc[j]);
      const float ml = dmin * static_cast<float>(mn[j]);
      const uint8_t* q = x[i].qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int l = 0; l < 32; ++l)
        y[32 * j + l] = dl * static_cast<float>((q[l] >> shift) & 0xf) - ml;
    }
  }
}

void dequantize_q5_k(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = half_to_float(x[i].d);
    const float dmin = half_to_float(x[i].dmin);
    uint8_t sc[8], mn[8];
    unpack_q4k_scales(x[i].scales, sc, mn);
    for (int j = 0; j < 8; ++j) {
      const float dl = d * static_cast<float>(sc[j]);
      const float ml = dmin * static_cast<float>(mn[j]);
      const uint8_t* q = x[i].qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 0xf) | (((x[i].qh[l] >> j) & 1) << 4);
        y[32 * j + l] = dl * static_cast<float>(v) - ml;
      }
    }
  }
}

void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = half_to_float(x[i].d);
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, k = (e / 32) % 4, l = e % 32;
      const uint8_t ql = x[i].ql[64 * h + 32 * (k % 2) + l];
      const uint8_t qh = x[i].qh[32 * h + l];
      const int q = (((ql >> (4 * (k / 2))) & 0xf) | (((qh >> (2 * k)) & 3) << 4)) - 32;
      // ggml evaluates d * scale first, then the quant.
      y[e] = d * static_cast<float>(x[i].scales[e / 16]) * static_cast<float>(q);
    }
  }
}

void dequantize_q8_k(const BlockQ8_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    for (int e = 0; e < kQK_K; ++e) y[e] = x[i].d * static_cast<float>(x[i].qs[e]);
  }
}

// ---- weight quantizers -------------------------------------------------------

void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float sub_scale[16], sub_min[16];
    for (int j = 0; j < 16; ++j) {
      const Affine f = fit_affine(x + 16 * j, 16, 3);
      sub_scale[j] = f.scale;
      sub_min[j] = f.min;
    }
    uint8_t sc[16], mn[16];
    quantize_scales(sub_scale, 16, 15, &y[i].d, sc);
    quantize_scales(sub_min, 16, 15, &y[i].dmin, mn);
    const float d = half_to_float(y[i].d), dmin = half_to_float(y[i].dmin);
    uint8_t L[kQK_K];
    for (int j = 0; j < 16; ++j) {
      y[i].scales[j] = static_cast<uint8_t>(sc[j] | (mn[j] << 4));
      requantize_affine(x + 16 * j, 16, 3, d * sc[j], dmin * mn[j], L + 16 * j);
    }
    std::memset(y[i].qs, 0, sizeof y[i].qs);
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, k = (e / 32) % 4, l = e % 32;
      y[i].qs[32 * h + l] = static_cast<uint8_t>(y[i].qs[32 * h + l] | (L[e] << (2 * k)));
    }
  }
}

void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float sub_scale[16];
    for (int j = 0; j < 16; ++j) sub_scale[j] = fit_symmetric(x + 16 * j, 16, 3);
    int sc[16];
    const float d = quantize_signed_scales(sub_scale, 16, 31, sc);
    y[i].d = float_to_half(d);
    const float df = half_to_float(y[i].d);
    uint8_t biased[16];
    for (int j = 0; j < 16; ++j) biased[j] = static_cast<uint8_t>(sc[j] + 32);
    pack_q3k_scales(biased, y[i].scales);
    std::memset(y[i].qs, 0, sizeof y[i].qs);
    std::memset(y[i].hmask, 0, sizeof y[i].hmask);
    for (int e = 0; e < kQK_K; ++e) {
      const float ds = df * static_cast<float>(sc[e / 16]);
      const int q = ds != 0.0f ? std::clamp(round_int(x[e] / ds), -4, 3) + 4 : 4;  // 0..7
      const int h = e / 128, k = (e / 32) % 4, l = e % 32;
      y[i].qs[32 * h + l] = static_cast<uint8_t>(y[i].qs[32 * h + l] | ((q & 3) << (2 * k)));
      if (q & 4) y[i].hmask[l] = static_cast<uint8_t>(y[i].hmask[l] | (1 << (4 * h + k)));
    }
  }
}

void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    uint8_t L[kQK_K];
    quantize_q45k_superblock(x, 15, y[i].scales, &y[i].d, &y[i].dmin, L);
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        y[i].qs[32 * j + l] = static_cast<uint8_t>(L[64 * j + l] | (L[64 * j + 32 + l] << 4));
      }
    }
  }
}

void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    uint8_t L[kQK_K];
    quantize_q45k_superblock(x, 31, y[i].scales, &y[i].d, &y[i].dmin, L);
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        const int lo = L[64 * j + l], hi = L[64 * j + 32 + l];
        y[i].qs[32 * j + l] = static_cast<uint8_t>((lo & 0xf) | ((hi & 0xf) << 4));
        y[i].qh[l] =
            static_cast<uint8_t>(y[i].qh[l] | ((lo >> 4) << (2 * j)) | ((hi >> 4) << (2 * j + 1)));
      }
    }
  }
}

void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float sub_scale[16];
    for (int j = 0; j < 16; ++j) sub_scale[j] = fit_symmetric(x + 16 * j, 16, 31);
    int sc[16];
    const float d = quantize_signed_scales(sub_scale, 16, 127, sc);
    y[i].d = float_to_half(d);
    const float df = half_to_float(y[i].d);
    for (int j = 0; j < 16; ++j) y[i].scales[j] = static_cast<int8_t>(sc[j]);
    std::memset(y[i].ql, 0, sizeof y[i].ql);
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    for (int e = 0; e < kQK_K; ++e) {
      const float ds = df * static_cast<float>(sc[e / 16]);
      const int q = ds != 0.0f ? std::clamp(round_int(x[e] / ds), -32, 31) + 32 : 32;  // 0..63
      const int h = e / 128, k = (e / 32) % 4, l = e % 32;
      uint8_t& ql = y[i].ql[64 * h + 32 * (k % 2) + l];
      ql = static_cast<uint8_t>(ql | ((q & 0xf) << (4 * (k / 2))));
      uint8_t& qh = y[i].qh[32 * h + l];
      qh = static_cast<uint8_t>(qh | ((q >> 4) << (2 * k)));
    }
  }
}

// ---- activation format ---------------------------------------------------------

void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float amax = 0.0f, m = 0.0f;
    for (int e = 0; e < kQK_K; ++e) {
      if (std::fabs(x[e]) > amax) {
        amax = std::fabs(x[e]);
        m = x[e];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    const float iscale = -127.0f / m;
    for (int e = 0; e < kQK_K; ++e)
      y[i].qs[e] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[e])));
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * g + l];
      y[i].bsums[g] = static_cast<int16_t>(sum);
    }
    y[i].d = 1.0f / iscale;
  }
}

}  // namespace edgelm::kernels::ref
