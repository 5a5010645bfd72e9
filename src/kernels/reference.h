// Internal: the scalar reference (de)quantizers of each block format, called
// by dequantize_row / quantize_row and by the tests. n is always a multiple of
// the format's block size. These are the oracle every SIMD kernel is checked
// against; they favour obviousness over speed.
#pragma once

#include <cstdint>

#include "kernels/blocks.h"

namespace edgelm::kernels::ref {

// Dequantization: the exact ggml formulas (bit-identical results up to the
// compiler's choice of fusing a*b+c).
void dequantize_q4_0(const BlockQ4_0* x, float* y, int64_t n);
void dequantize_q4_1(const BlockQ4_1* x, float* y, int64_t n);
void dequantize_q5_0(const BlockQ5_0* x, float* y, int64_t n);
void dequantize_q5_1(const BlockQ5_1* x, float* y, int64_t n);
void dequantize_q8_0(const BlockQ8_0* x, float* y, int64_t n);
void dequantize_q8_1(const BlockQ8_1* x, float* y, int64_t n);
void dequantize_q2_k(const BlockQ2_K* x, float* y, int64_t n);
void dequantize_q3_k(const BlockQ3_K* x, float* y, int64_t n);
void dequantize_q4_k(const BlockQ4_K* x, float* y, int64_t n);
void dequantize_q5_k(const BlockQ5_K* x, float* y, int64_t n);
void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t n);
void dequantize_q8_k(const BlockQ8_K* x, float* y, int64_t n);

// Weight quantizers: valid blocks with round-to-nearest quants and a
// sensible (least-squares refined) scale choice; not bit-compatible with
// llama-quantize, which is not required of them.
void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t n);
void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t n);
void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t n);
void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t n);
void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t n);
void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t n);
void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t n);
void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t n);
void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t n);

// Activation quantizers, exactly ggml's reference semantics (the SIMD
// versions reproduce them bit for bit):
//   Q8_0: d = amax / 127 (f16), q = roundf(x / d) (ties away from zero).
//   Q8_1: as Q8_0, plus s = f16(d * sum(q)).
//   Q8_K: for the value m of largest magnitude, iscale = -127 / m, q = the
//         nearest integer (ties to even) of iscale * x capped at 127,
//         d = 1 / iscale (f32), bsums of 16-element groups.
// Q8_0 is also a weight and a KV cache format.
void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_q8_1(const float* x, BlockQ8_1* y, int64_t n);
void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t n);

}  // namespace edgelm::kernels::ref
