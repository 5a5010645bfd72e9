// Instruction-set detection and dispatch of the public kernel entry points.
//
// Resolution happens once: for every (requested ISA, type) pair the first
// kernel found along the fallback chain is stored in a table, so a call costs
// one indexed load. Chains: Avx512 -> Avx2 -> Scalar, AvxVnni -> Avx2 ->
// Scalar and Neon -> Scalar; an ISA the build or the CPU lacks is replaced by
// the next one down its chain. (AVX-512 with VNNI covers what AVX-VNNI adds,
// so a CPU with both uses avx512.)

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>

#if defined(EDGELM_ARM64) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/fp16.h"
#include "kernels/kernels.h"

namespace edgelm::kernels {
namespace {

constexpr int kNumIsas = 5;

Isa lower(Isa isa) {
  switch (isa) {
    case Isa::Avx512:
    case Isa::AvxVnni:
      return Isa::Avx2;
    default:
      return Isa::Scalar;
  }
}

#if defined(EDGELM_X86)
// Feature bits the compilers' __builtin_cpu_supports does not know in every
// version (clang 14 lacks "f16c" and "avxvnni"), read from CPUID directly.
struct CpuidRegs {
  unsigned a, b, c, d;
};
CpuidRegs cpuid(unsigned leaf, unsigned sub) {
  CpuidRegs r;
  __asm__ volatile("cpuid" : "=a"(r.a), "=b"(r.b), "=c"(r.c), "=d"(r.d) : "a"(leaf), "c"(sub));
  return r;
}
bool has_f16c() { return (cpuid(1, 0).c >> 29) & 1u; }     // leaf 1, ECX bit 29
bool has_avxvnni() { return (cpuid(7, 1).a >> 4) & 1u; }  // leaf 7, sub-leaf 1, EAX bit 4
#endif

bool cpu_has(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return true;
#if defined(EDGELM_X86)
    // The flags the *_avx2.cpp / *_avx512.cpp files are compiled with; the
    // compiler may use any of them, so all must be present. (libgcc also
    // checks that the OS saves the wider registers.)
    case Isa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c() &&
             __builtin_cpu_supports("bmi2");
    case Isa::Avx512:
      return cpu_has(Isa::Avx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
    case Isa::AvxVnni:
      return cpu_has(Isa::Avx2) && has_avxvnni();
#endif
#if defined(EDGELM_ARM64)
    // The *_neon.cpp files are built for armv8.2-a + dotprod + fp16 (RK3588's
    // A76, Orin's A78AE); an older core (a Raspberry Pi 4's A72) runs the
    // scalar kernels instead of faulting.
    case Isa::Neon: {
#if defined(__linux__)
      const unsigned long hw = getauxval(AT_HWCAP);
      return (hw & HWCAP_ASIMD) && (hw & HWCAP_ASIMDDP) && (hw & HWCAP_FPHP) && (hw & HWCAP_ASIMDHP);
#else
      return true;  // Apple's arm64 cores all have dotprod and fp16
#endif
    }
#endif
    default:
      return false;
  }
}

const Backend* backend_of(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return &scalar_backend();
#if defined(EDGELM_X86)
    case Isa::Avx2:
      return &avx2_backend();
    case Isa::Avx512:
      return &avx512_backend();
    case Isa::AvxVnni:
      return &avxvnni_backend();
#endif
#if defined(EDGELM_ARM64)
    case Isa::Neon:
      return &neon_backend();
#endif
    default:
      return nullptr;
  }
}

struct Resolved {
  GemmFn gemm[kNumIsas][kNumDTypeSlots] = {};
  GemmFn gemm_i16[kNumIsas][kNumDTypeSlots] = {};
  // The ISA at which the interleaved kernel was found (scalar = only the reference).
  Isa gemm_i16_isa[kNumIsas][kNumDTypeSlots] = {};
  QuantizeFn quantize[kNumIsas][3] = {};
  DotKvFn dot_kv[kNumIsas][3] = {};
  AxpyKvFn axpy_kv[kNumIsas][3] = {};
  KvToF32Fn kv_to_f32[kNumIsas][3] = {};
  AttnScoresFn attn_scores[kNumIsas] = {};
  AttnAccumulateFn attn_accumulate[kNumIsas] = {};
  AttnScoresF16Fn attn_scores_f16[kNumIsas] = {};
  AttnAccumulateF16Fn attn_accumulate_f16[kNumIsas] = {};
  AttnExpSumFn attn_exp_sum[kNumIsas] = {};
  AttnMaxFn attn_max[kNumIsas] = {};
  SiluMulFn silu_mul[kNumIsas] = {};
  RmsNormFn rms_norm[kNumIsas] = {};
  RopeFn rope[kNumIsas] = {};
};

// The first non-null entry along the chain that starts at the best available
// ISA at or below `isa`.
template <class Fn, class Get>
Fn first_along_chain(Isa isa, Get get) {
  while (isa != Isa::Scalar && !cpu_has(isa)) isa = lower(isa);
  for (;;) {
    if (const Backend* be = backend_of(isa)) {
      if (Fn f = get(*be)) return f;
    }
    if (isa == Isa::Scalar) return nullptr;
    isa = lower(isa);
  }
}

Resolved resolve() {
  Resolved r;
  for (int i = 0; i < kNumIsas; ++i) {
    const auto isa = static_cast<Isa>(i);
    for (int t = 0; t < kNumDTypeSlots; ++t) {
      r.gemm[i][t] = first_along_chain<GemmFn>(isa, [t](const Backend& b) { return b.gemm[t]; });
      r.gemm_i16[i][t] = first_along_chain<GemmFn>(isa, [t](const Backend& b) { return b.gemm_i16[t]; });
      // Which ISA provided it: a layout is preferred only where a SIMD kernel uses it.
      for (Isa j = isa;; j = lower(j)) {
        const Backend* be = cpu_has(j) ? backend_of(j) : nullptr;
        if (be && be->gemm_i16[t]) {
          r.gemm_i16_isa[i][t] = j;
          break;
        }
        if (j == Isa::Scalar) break;
      }
    }
    for (int k = 0; k < 3; ++k) {
      r.quantize[i][k] =
          first_along_chain<QuantizeFn>(isa, [k](const Backend& b) { return b.quantize[k]; });
      r.dot_kv[i][k] =
          first_along_chain<DotKvFn>(isa, [k](const Backend& b) { return b.dot_kv[k]; });
      r.axpy_kv[i][k] =
          first_along_chain<AxpyKvFn>(isa, [k](const Backend& b) { return b.axpy_kv[k]; });
      r.kv_to_f32[i][k] =
          first_along_chain<KvToF32Fn>(isa, [k](const Backend& b) { return b.kv_to_f32[k]; });
    }
    r.attn_scores[i] = first_along_chain<AttnScoresFn>(isa, [](const Backend& b) { return b.attn_scores; });
    r.attn_accumulate[i] =
        first_along_chain<AttnAccumulateFn>(isa, [](const Backend& b) { return b.attn_accumulate; });
    r.attn_scores_f16[i] =
        first_along_chain<AttnScoresF16Fn>(isa, [](const Backend& b) { return b.attn_scores_f16; });
    r.attn_accumulate_f16[i] =
        first_along_chain<AttnAccumulateF16Fn>(isa, [](const Backend& b) { return b.attn_accumulate_f16; });
    r.attn_exp_sum[i] = first_along_chain<AttnExpSumFn>(isa, [](const Backend& b) { return b.attn_exp_sum; });
    r.attn_max[i] = first_along_chain<AttnMaxFn>(isa, [](const Backend& b) { return b.attn_max; });
    r.silu_mul[i] = first_along_chain<SiluMulFn>(isa, [](const Backend& b) { return b.silu_mul; });
    r.rms_norm[i] = first_along_chain<RmsNormFn>(isa, [](const Backend& b) { return b.rms_norm; });
    r.rope[i] = first_along_chain<RopeFn>(isa, [](const Backend& b) { return b.rope; });
  }
  return r;
}

const Resolved& table() {
  static const Resolved r = resolve();
  return r;
}

int isa_index(Isa isa) {
  const int i = static_cast<int>(isa);
  return i >= 0 && i < kNumIsas ? i : 0;
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return "scalar";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
    case Isa::Neon:
      return "neon";
    case Isa::AvxVnni:
      return "avxvnni";
  }
  return "unknown";
}

const std::vector<Isa>& supported_isas() {
  static const std::vector<Isa> isas = [] {
    std::vector<Isa> v;
    // Weakest to strongest: best_isa() is the last.
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::AvxVnni, Isa::Avx512, Isa::Neon}) {
      if (cpu_has(isa) && backend_of(isa) != nullptr) v.push_back(isa);
    }
    return v;
  }();
  return isas;
}

Isa best_isa() {
  return supported_isas().back();
}

DType act_type(DType weight_type) {
  switch (weight_type) {
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0:
      return DType::Q8_0;
    case DType::Q4_1:
    case DType::Q5_1:
      return DType::Q8_1;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return DType::Q8_K;
    default:
      return DType::F32;
  }
}

namespace {
// The activation formats that carry a trailer of block sums.
bool has_block_sums(DType act) { return act == DType::Q8_0 || act == DType::Q8_1; }

template <class XB>
void write_block_sums(void* row, int64_t nb) {
  const auto* blocks = static_cast<const XB*>(row);
  uint8_t* trailer = static_cast<uint8_t*>(row) + static_cast<size_t>(nb) * sizeof(XB);
  for (int64_t b = 0; b < nb; ++b) {
    int32_t sum = 0;
    for (int j = 0; j < 32; ++j) sum += blocks[b].qs[j];
    std::memcpy(trailer + b * sizeof(int32_t), &sum, sizeof(sum));
  }
}
}  // namespace

size_t act_row_bytes(DType weight_type, int64_t n) {
  const DType at = act_type(weight_type);
  const size_t sums = has_block_sums(at) ? static_cast<size_t>(n / 32) * sizeof(int32_t) : 0;
  return row_bytes(at, n) + sums;
}

void quantize_activation(Isa isa, DType weight_type, const float* x, void* dst, int64_t n) {
  const DType at = act_type(weight_type);
  if (at == DType::F32) {
    std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  table().quantize[isa_index(isa)][act_slot(at)](x, dst, n);
  if (at == DType::Q8_0) write_block_sums<BlockQ8_0>(dst, n / 32);
  if (at == DType::Q8_1) write_block_sums<BlockQ8_1>(dst, n / 32);
}

Layout preferred_layout(Isa isa, DType type, int64_t rows, int64_t cols) {
  const auto t = static_cast<size_t>(type);
  if (t >= kNumDTypeSlots || rows % 16 != 0 || cols % 32 != 0 || cols <= 0) return Layout::Rows;
  const Resolved& r = table();
  if (r.gemm_i16[isa_index(isa)][t] == nullptr || r.gemm_i16_isa[isa_index(isa)][t] == Isa::Scalar)
    return Layout::Rows;
  return Layout::Interleave16;
}

void gemm(Isa isa, const GemmArgs& a, int64_t r0, int64_t r1) {
  if (r1 <= r0 || a.n_tok <= 0) return;
  const auto t = static_cast<size_t>(a.wtype);
  if (a.layout == Layout::Interleave16) {
    GemmFn f = t < kNumDTypeSlots ? table().gemm_i16[isa_index(isa)][t] : nullptr;
    if (f == nullptr || r0 % 16 != 0 || (r1 % 16 != 0)) std::abort();  // packed only where a kernel exists
    f(a, r0, r1);
    return;
  }
  GemmFn f = t < kNumDTypeSlots ? table().gemm[isa_index(isa)][t] : nullptr;
  if (f == nullptr) std::abort();  // no kernel for this type: the loader checks engine_supported
  f(a, r0, r1);
}

float dot_f32_kv(Isa isa, DType kv_type, const float* q, const void* k, int64_t n) {
  const int s = kv_slot(kv_type);
  if (s < 0) std::abort();
  return table().dot_kv[isa_index(isa)][s](q, k, n);
}

void axpy_kv(Isa isa, DType kv_type, float a, const void* v, float* y, int64_t n) {
  const int s = kv_slot(kv_type);
  if (s < 0) std::abort();
  table().axpy_kv[isa_index(isa)][s](a, v, y, n);
}

void kv_to_f32(Isa isa, DType kv_type, const void* src, size_t src_stride, int rows, float* dst, int64_t n) {
  const int s = kv_slot(kv_type);
  if (s < 0) std::abort();
  if (rows > 0) table().kv_to_f32[isa_index(isa)][s](src, src_stride, rows, dst, n);
}

void request_bytes(const void* p, size_t n) { request_lines(p, n); }

void attn_scores(Isa isa, const float* q, int nq, const float* k, int nk, int64_t d, float* s, int64_t lds) {
  if (nq > 0 && nk > 0) table().attn_scores[isa_index(isa)](q, nq, k, nk, d, s, lds);
}

void attn_accumulate(Isa isa, const float* p, int64_t ldp, int nq, const float* v, int nk, int64_t d, float* o) {
  if (nq > 0 && nk > 0) table().attn_accumulate[isa_index(isa)](p, ldp, nq, v, nk, d, o);
}

void attn_scores_f16(Isa isa, const float* q, int nq, const uint16_t* k, int nk, int64_t d,
                     float* s, int64_t lds, const uint16_t* ahead, int n_ahead) {
  if (nq > 0 && nk > 0)
    table().attn_scores_f16[isa_index(isa)](q, nq, k, nk, d, s, lds, ahead, n_ahead);
}

void attn_accumulate_f16(Isa isa, const float* p, int64_t ldp, int nq, const uint16_t* v, int nk,
                         int64_t d, float* o, const uint16_t* ahead, int n_ahead) {
  if (nq > 0 && nk > 0)
    table().attn_accumulate_f16[isa_index(isa)](p, ldp, nq, v, nk, d, o, ahead, n_ahead);
}

float attn_exp_sum(Isa isa, float* s, int n, float m) {
  return n > 0 ? table().attn_exp_sum[isa_index(isa)](s, n, m) : 0.0f;
}

float attn_max(Isa isa, const float* s, int n) {
  return n > 0 ? table().attn_max[isa_index(isa)](s, n) : -INFINITY;
}

void silu_mul(Isa isa, float* g, const float* u, int64_t n) {
  if (n > 0) table().silu_mul[isa_index(isa)](g, u, n);
}

void rms_norm(Isa isa, const float* x, const float* w, float* y, int64_t n, float eps) {
  if (n > 0) table().rms_norm[isa_index(isa)](x, w, y, n, eps);
}

void rope(Isa isa, float* x, int n_heads, int head_dim, const float* table_, int rope_dim, bool neox) {
  if (n_heads > 0 && rope_dim >= 2) table().rope[isa_index(isa)](x, n_heads, head_dim, table_, rope_dim, neox);
}

void store_kv(DType kv_type, const float* src, void* dst, int64_t n) {
  switch (kv_type) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::F16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp::float_to_half(src[i]);
      return;
    }
    case DType::Q8_0:
      // Every ISA's Q8_0 quantizer is bit-identical to the reference, so the
      // fastest one is used.
      table().quantize[isa_index(best_isa())][act_slot(DType::Q8_0)](src, dst, n);
      return;
    default:
      std::abort();
  }
}

}  // namespace edgelm::kernels
