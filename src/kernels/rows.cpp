// Public element conversions and whole-row (de)quantization: thin wrappers
// that route a DType to its reference implementation.

#include <cstdlib>
#include <cstring>

#include "kernels/fp16.h"
#include "kernels/kernels.h"
#include "kernels/reference.h"

namespace edgelm::kernels {

float fp16_to_fp32(uint16_t h) {
  return fp::half_to_float(h);
}
uint16_t fp32_to_fp16(float f) {
  return fp::float_to_half(f);
}
float bf16_to_fp32(uint16_t h) {
  return fp::bf16_to_float(h);
}
uint16_t fp32_to_bf16(float f) {
  return fp::float_to_bf16(f);
}

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  switch (type) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::F16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp::half_to_float(h[i]);
      return;
    }
    case DType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp::bf16_to_float(h[i]);
      return;
    }
    case DType::Q4_0:
      return ref::dequantize_q4_0(static_cast<const BlockQ4_0*>(src), dst, n);
    case DType::Q4_1:
      return ref::dequantize_q4_1(static_cast<const BlockQ4_1*>(src), dst, n);
    case DType::Q5_0:
      return ref::dequantize_q5_0(static_cast<const BlockQ5_0*>(src), dst, n);
    case DType::Q5_1:
      return ref::dequantize_q5_1(static_cast<const BlockQ5_1*>(src), dst, n);
    case DType::Q8_0:
      return ref::dequantize_q8_0(static_cast<const BlockQ8_0*>(src), dst, n);
    case DType::Q8_1:
      return ref::dequantize_q8_1(static_cast<const BlockQ8_1*>(src), dst, n);
    case DType::Q2_K:
      return ref::dequantize_q2_k(static_cast<const BlockQ2_K*>(src), dst, n);
    case DType::Q3_K:
      return ref::dequantize_q3_k(static_cast<const BlockQ3_K*>(src), dst, n);
    case DType::Q4_K:
      return ref::dequantize_q4_k(static_cast<const BlockQ4_K*>(src), dst, n);
    case DType::Q5_K:
      return ref::dequantize_q5_k(static_cast<const BlockQ5_K*>(src), dst, n);
    case DType::Q6_K:
      return ref::dequantize_q6_k(static_cast<const BlockQ6_K*>(src), dst, n);
    case DType::Q8_K:
      return ref::dequantize_q8_k(static_cast<const BlockQ8_K*>(src), dst, n);
    default:
      std::abort();  // a type without kernels: the caller checked engine_supported
  }
}

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  switch (type) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::F16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp::float_to_half(src[i]);
      return;
    }
    case DType::BF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp::float_to_bf16(src[i]);
      return;
    }
    case DType::Q4_0:
      return ref::quantize_q4_0(src, static_cast<BlockQ4_0*>(dst), n);
    case DType::Q4_1:
      return ref::quantize_q4_1(src, static_cast<BlockQ4_1*>(dst), n);
    case DType::Q5_0:
      return ref::quantize_q5_0(src, static_cast<BlockQ5_0*>(dst), n);
    case DType::Q5_1:
      return ref::quantize_q5_1(src, static_cast<BlockQ5_1*>(dst), n);
    case DType::Q8_0:
      return ref::quantize_q8_0(src, static_cast<BlockQ8_0*>(dst), n);
    case DType::Q8_1:
      return ref::quantize_q8_1(src, static_cast<BlockQ8_1*>(dst), n);
    case DType::Q2_K:
      return ref::quantize_q2_k(src, static_cast<BlockQ2_K*>(dst), n);
    case DType::Q3_K:
      return ref::quantize_q3_k(src, static_cast<BlockQ3_K*>(dst), n);
    case DType::Q4_K:
      return ref::quantize_q4_k(src, static_cast<BlockQ4_K*>(dst), n);
    case DType::Q5_K:
      return ref::quantize_q5_k(src, static_cast<BlockQ5_K*>(dst), n);
    case DType::Q6_K:
      return ref::quantize_q6_k(src, static_cast<BlockQ6_K*>(dst), n);
    case DType::Q8_K:
      return ref::quantize_q8_k(src, static_cast<BlockQ8_K*>(dst), n);
    default:
      std::abort();
  }
}

}  // namespace edgelm::kernels
