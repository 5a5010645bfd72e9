// Internal: the kernel table each instruction set provides, and how
// dispatch.cpp finds them. Not part of the public API (see kernels.h).
//
// A backend fills in only the entries it implements; a null entry makes
// dispatch fall through to the next instruction set below (AVX-512 -> AVX2 ->
// scalar, AVX-VNNI -> AVX2, NEON -> scalar), so a format can gain a SIMD path
// one ISA at a time.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"

namespace edgelm::kernels {

// y[t * ldy + r] for r in [r0, r1), t in [0, n_tok); see GemmArgs.
using GemmFn = void (*)(const GemmArgs& a, int64_t r0, int64_t r1);
// One f32 row of n elements -> an activation row.
using QuantizeFn = void (*)(const float* x, void* dst, int64_t n);
using DotKvFn = float (*)(const float* q, const void* k, int64_t n);
using AxpyKvFn = void (*)(float a, const void* v, float* y, int64_t n);
using KvToF32Fn = void (*)(const void* src, size_t src_stride, int rows, float* dst, int64_t n);
using AttnScoresFn = void (*)(const float* q, int nq, const float* k, int nk, int64_t d, float* s, int64_t lds);
using AttnExpSumFn = float (*)(float* s, int n, float m);
using AttnMaxFn = float (*)(const float* s, int n);
using AttnAccumulateFn = void (*)(const float* p, int64_t ldp, int nq, const float* v, int nk, int64_t d, float* o);
using AttnScoresF16Fn = void (*)(const float* q, int nq, const uint16_t* k, int nk, int64_t d,
                                 float* s, int64_t lds, const uint16_t* ahead, int n_ahead);
using AttnAccumulateF16Fn = void (*)(const float* p, int64_t ldp, int nq, const uint16_t* v, int nk,
                                     int64_t d, float* o, const uint16_t* ahead, int n_ahead);
using SiluMulFn = void (*)(float* g, const float* u, int64_t n);
using RmsNormFn = void (*)(const float* x, const float* w, float* y, int64_t n, float eps);
using RopeFn = void (*)(float* x, int n_heads, int head_dim, const float* table, int rope_dim, bool neox);

// Fully unrolls a loop over a tile's rows or columns (a template constant).
// GCC 12 otherwise keeps an array of vector accumulators in memory and
// stores every one of them on each trip of the loop around it (measured: the
// attention score tile ran about 3x slower); unrolled first, they live in
// registers.
#define EDGELM_UNROLL _Pragma("GCC unroll 16")

// Requests row j of `ahead` (rows of d elements E, the stride of the rows
// the kernel reads) from memory while the kernel works on its own row j,
// for j < n_ahead: the attention tiles' F16 entry points (kernels.h). A
// hint, spread over the work: measured faster than one burst a block
// (model/attention.cpp).
//
// Into L2, not L1: a block ahead is 16 KiB of keys or values (64 positions
// of a 128-wide F16 head) beside the 16 KiB the kernel is reading, and an
// L1 of 32 KiB (Zen 4, Intel's E-cores, Cortex-A55) cannot hold both: the
// request into L1 evicted the rows still being read. Measured on a Zen 4
// (build/edgelm_kernel_bench --benchmark_filter='attend_decode/2048/./8/2',
// medians of 3, five alternated rounds, the rounds' median and range; load
// 0.47 before): one thread 4.68 ms (4.61-4.94) against 6.10 (6.06-6.39)
// into L1, two threads 2.62 (2.54-2.81) against 3.46 (3.29-3.52). The NEON
// request is the same level, not measured on an ARM core.
//
// The request is an asm statement, not __builtin_prefetch: GCC 12 counts a
// loop of __builtin_prefetch under a condition as free of side effects and
// deletes it (seen here: not one prefetch was left of this loop).
inline void request_line(const void* p) {
#if defined(__x86_64__)
  asm volatile("prefetcht1 (%0)" : : "r"(p));
#elif defined(__aarch64__)
  asm volatile("prfm pldl2keep, [%0]" : : "r"(p));
#else
  __builtin_prefetch(p, 0, 2);
#endif
}

// Every line of the bytes [p, p + n).
inline void request_lines(const void* p, size_t n) {
  const auto* c = static_cast<const char*>(p);
  for (size_t off = 0; off < n; off += 64) request_line(c + off);
}

template <class E>
inline void request_row(const E* ahead, int n_ahead, int j, int64_t d) {
  if (ahead == nullptr || j >= n_ahead) return;
  request_lines(ahead + j * d, static_cast<size_t>(d) * sizeof(E));
}

constexpr int kNumDTypeSlots = 40;  // covers every DType id

// Index of a KV cache type in the KV tables: F32 0, F16 1, Q8_0 2; -1 if the
// type is not a KV type.
constexpr int kv_slot(DType t) {
  return t == DType::F32 ? 0 : t == DType::F16 ? 1 : t == DType::Q8_0 ? 2 : -1;
}

// A KvToF32Fn from a one-row converter: rows at a byte stride, each
// converted by Row (a template argument, inlined: no call per row). Every
// ISA's file instantiates it with its own row converters.
template <void (*Row)(const void*, float*, int64_t)>
void kv_rows(const void* src, size_t src_stride, int rows, float* dst, int64_t n) {
  for (int r = 0; r < rows; ++r) Row(static_cast<const uint8_t*>(src) + r * src_stride, dst + r * n, n);
}
// Index of an activation format in the quantize table: Q8_0 0, Q8_1 1, Q8_K 2.
constexpr int act_slot(DType t) {
  return t == DType::Q8_0 ? 0 : t == DType::Q8_1 ? 1 : t == DType::Q8_K ? 2 : -1;
}

struct Backend {
  GemmFn gemm[kNumDTypeSlots] = {};      // by weight type id, Layout::Rows
  GemmFn gemm_i16[kNumDTypeSlots] = {};  // by weight type id, Layout::Interleave16
  QuantizeFn quantize[3] = {};       // by act_slot
  DotKvFn dot_kv[3] = {};            // by kv_slot
  AxpyKvFn axpy_kv[3] = {};          // by kv_slot
  KvToF32Fn kv_to_f32[3] = {};       // by kv_slot
  AttnScoresFn attn_scores = nullptr;
  AttnAccumulateFn attn_accumulate = nullptr;
  AttnScoresF16Fn attn_scores_f16 = nullptr;
  AttnAccumulateF16Fn attn_accumulate_f16 = nullptr;
  AttnExpSumFn attn_exp_sum = nullptr;
  AttnMaxFn attn_max = nullptr;
  SiluMulFn silu_mul = nullptr;
  RmsNormFn rms_norm = nullptr;
  RopeFn rope = nullptr;
};

// The tables. The SIMD ones exist only when their sources are compiled for
// this architecture (see edgelm_module in CMakeLists.txt).
const Backend& scalar_backend();
// The scalar reference for interleaved layouts (pack.cpp).
void register_interleaved_scalar(Backend& be);
// Attention tiles (attn_*.cpp), one per ISA.
void register_attn_scalar(Backend& be);
#if defined(EDGELM_X86)
const Backend& avx2_backend();
const Backend& avx512_backend();
const Backend& avxvnni_backend();
// Each ISA's table is filled by several files, one per kernel family.
void register_kquants_avx2(Backend& be);
void register_act_avx2(Backend& be);
void register_interleaved_avx2(Backend& be);
void register_kquants_avx512(Backend& be);
void register_interleaved_avx512(Backend& be);
void register_act_avx512(Backend& be);
void register_attn_avx2(Backend& be);
void register_attn_avx512(Backend& be);
#endif
#if defined(EDGELM_ARM64)
const Backend& neon_backend();
void register_kquants_neon(Backend& be);
void register_act_neon(Backend& be);
void register_interleaved_neon(Backend& be);
void register_attn_neon(Backend& be);
#endif

}  // namespace edgelm::kernels
