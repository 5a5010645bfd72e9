// Helpers shared by the kernel tests: random rows, random-but-valid weight
// blocks, and the magnitude a float comparison should be relative to.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/blocks.h"
#include "kernels/kernels.h"

namespace edgelm::kernels::test {

// Every weight type with kernels.
inline const std::vector<DType>& weight_types() {
  static const std::vector<DType> v = {
      DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
      DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  return v;
}

inline int64_t block_size(DType t) {
  return dtype_info(t).block_size;
}

inline std::vector<float> random_floats(int64_t n, std::mt19937& rng, float sigma = 1.0f) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// Byte ranges of a block that hold f16 scales (everything else in a block is
// quants or packed integer scales, where any bit pattern is valid).
struct HalfField {
  int offset;
};
inline std::vector<HalfField> half_fields(DType t) {
  switch (t) {
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0:
      return {{0}};
    case DType::Q4_1:
    case DType::Q5_1:
      return {{0}, {2}};
    case DType::Q2_K:
      return {{80}, {82}};
    case DType::Q3_K:
      return {{108}};
    case DType::Q4_K:
    case DType::Q5_K:
      return {{0}, {2}};
    case DType::Q6_K:
      return {{208}};
    default:
      return {};
  }
}

// Weight rows whose quant bits are uniformly random (so every quant value,
// including the extremes, occurs) and whose f16 scales are random in
// [-scale, scale] (positive for the K formats' super-scales of mins/scales,
// as llama-quantize writes them). Float types get normal values.
inline std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t n, std::mt19937& rng) {
  const size_t rb = row_bytes(t, n);
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
  if (t == DType::F32 || t == DType::F16 || t == DType::BF16) {
    for (int64_t r = 0; r < rows; ++r) {
      auto f = random_floats(n, rng);
      quantize_row(t, f.data(), w.data() + r * rb, n);
    }
    return w;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
  const bool kquant = dtype_info(t).block_size == 256;
  std::uniform_real_distribution<float> u(kquant ? 0.0f : -1.0f, 1.0f);
  const size_t bs = dtype_info(t).type_size;
  const float scale = kquant ? 0.01f : 0.1f;
  for (size_t off = 0; off < w.size(); off += bs) {
    for (HalfField h : half_fields(t)) {
      const uint16_t v = fp32_to_fp16(u(rng) * scale);
      std::memcpy(&w[off + static_cast<size_t>(h.offset)], &v, 2);
    }
  }
  return w;
}

// Weight rows quantized from normal values by the reference quantizer.
inline std::vector<uint8_t> quantized_weights(DType t, int64_t rows, int64_t n, std::mt19937& rng) {
  const size_t rb = row_bytes(t, n);
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    auto f = random_floats(n, rng);
    quantize_row(t, f.data(), w.data() + r * rb, n);
  }
  return w;
}

// A copy of weight rows with every quant set to zero, so that dequantizing
// it gives each element's additive offset (the block minimum of the affine
// formats, -8d / -16d / -32d... for the symmetric ones).
inline std::vector<uint8_t> zero_quants(DType t, const std::vector<uint8_t>& w) {
  std::vector<uint8_t> z = w;
  const size_t bs = dtype_info(t).type_size;
  auto clear = [&](size_t from, size_t len) {
    for (size_t off = 0; off < z.size(); off += bs) std::memset(&z[off + from], 0, len);
  };
  switch (t) {
    case DType::Q4_0:
      clear(2, 16);
      break;
    case DType::Q4_1:
      clear(4, 16);
      break;
    case DType::Q5_0:
      clear(2, 20);
      break;
    case DType::Q5_1:
      clear(4, 20);
      break;
    case DType::Q8_0:
      clear(2, 32);
      break;
    case DType::Q2_K:
      clear(16, 64);
      break;
    case DType::Q3_K:
      clear(0, 96);
      break;
    case DType::Q4_K:
      clear(16, 128);
      break;
    case DType::Q5_K:
      clear(16, 160);
      break;
    case DType::Q6_K:
      clear(0, 192);
      break;
    default:
      std::fill(z.begin(), z.end(), 0);
      break;
  }
  return z;
}

inline std::vector<float> dequantize(DType t, const void* row, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  dequantize_row(t, row, v.data(), n);
  return v;
}

}  // namespace edgelm::kernels::test
