// Internal: the activation quantizers (Q8_0, Q8_1, Q8_K; bit-identical to the
// reference in reference.h) and the KV row helpers as every ISA registers
// them. The loops over blocks are written once here; an ISA's file
// (act_<isa>.cpp) supplies a struct A with the vector work:
//
//   static int q8_block(const float* x, uint16_t* d, int8_t* qs, float* d_exact);
//     // one 32-element block as reference.h's quantize_q8_0 does it: the
//     // f16 scale in *d, the unrounded one in *d_exact; returns the sum of
//     // the quants
//   static float abs_max_k(const float* x);  // max |x[i]| over 256 elements
//   static float first_of_magnitude(const float* x, float amax);
//     // the first of the 256 x[i] with |x[i]| == amax, sign included
//   static void q8_k_quants(const float* x, float iscale, int8_t* qs, int16_t* bsums);
//     // min(nearest_int(iscale * x[i]), 127) for 256 elements, and the 16
//     // sums of 16
//   dot_kv_f32, dot_kv_f16, dot_kv_q8_0, axpy_kv_f32, axpy_kv_f16,
//   axpy_kv_q8_0: the DotKvFn and AxpyKvFn of backend.h.
//
// Internal linkage, as tile_driver.h: A is always a type local to one
// translation unit, compiled with that ISA's flags.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/fp16.h"

namespace edgelm::kernels {
namespace {

template <class A>
void act_q8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  float d;
  for (int64_t b = 0; b < n / kQK; ++b) A::q8_block(x + b * kQK, &y[b].d, y[b].qs, &d);
}

// Q8_1's s is computed from the unrounded scale, as in the reference.
template <class A>
void act_q8_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    float d;
    const int sum = A::q8_block(x + b * kQK, &y[b].d, y[b].qs, &d);
    y[b].s = fp::float_to_half(static_cast<float>(sum) * d);
  }
}

template <class A>
void act_q8_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    const float amax = A::abs_max_k(x);
    if (amax == 0.0f) {
      std::memset(&y[b], 0, sizeof y[b]);
      continue;
    }
    // The reference keeps the first element of largest magnitude, sign included.
    const float iscale = -127.0f / A::first_of_magnitude(x, amax);
    A::q8_k_quants(x, iscale, y[b].qs, y[b].bsums);
    y[b].d = 1.0f / iscale;
  }
}

template <class A>
void register_act(Backend& be) {
  be.quantize[act_slot(DType::Q8_0)] = act_q8_0<A>;
  be.quantize[act_slot(DType::Q8_1)] = act_q8_1<A>;
  be.quantize[act_slot(DType::Q8_K)] = act_q8_k<A>;
  be.dot_kv[kv_slot(DType::F32)] = A::dot_kv_f32;
  be.dot_kv[kv_slot(DType::F16)] = A::dot_kv_f16;
  be.dot_kv[kv_slot(DType::Q8_0)] = A::dot_kv_q8_0;
  be.axpy_kv[kv_slot(DType::F32)] = A::axpy_kv_f32;
  be.axpy_kv[kv_slot(DType::F16)] = A::axpy_kv_f16;
  be.axpy_kv[kv_slot(DType::Q8_0)] = A::axpy_kv_q8_0;
}

}  // namespace
}  // namespace edgelm::kernels
