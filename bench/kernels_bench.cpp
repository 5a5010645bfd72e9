// Google Benchmark of the gemm kernels: every weight type x every ISA the CPU
// has x n_tok in {1, 32}, on the two matrix shapes of a Qwen2-1.5B MLP
// (n = 1536 -> 8960 rows, n = 8960 -> 1536 rows). Single thread.
//
// Reported: bytes_per_second = weight bytes / time (for n_tok = 32 each
// weight byte serves 32 tokens), and FLOP/s = 2 * n * rows * n_tok / time.
// The "/cold" variants (decode only) flush the weights from every cache level
// before each iteration, which is what decode sees on a model much larger
// than the last-level cache; the others run with whatever the caches keep
// (on a CPU with a large L3 that is the kernel's compute ceiling).
// Rates use CPU time, so that other processes on a shared machine inflate
// them less; use --benchmark_repetitions=N and read the medians.
//
//   build-kern/edgelm_kernel_bench --benchmark_filter='Q4_0|Q8_0|Q4_K|Q6_K'

#include <benchmark/benchmark.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"

namespace {

using edgelm::DType;
using namespace edgelm::kernels;

// Byte offsets of the f16 scale fields in one block; everything else in a
// block may hold any bits.
std::vector<int> half_fields(DType t) {
  switch (t) {
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0:
      return {0};
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:
      return {0, 2};
    case DType::Q2_K:
      return {80, 82};
    case DType::Q3_K:
      return {108};
    case DType::Q6_K:
      return {208};
    default:
      return {};
  }
}

// Random weights with valid, modest scales (quantizing 14M floats per type
// with the reference quantizers would dominate the benchmark's start-up).
struct Problem {
  DType type;
  int64_t n, rows;
  std::vector<uint8_t> w;
  std::vector<float> xf;
};

std::unique_ptr<Problem> make_problem(DType t, int64_t n, int64_t rows) {
  auto p = std::make_unique<Problem>();
  p->type = t;
  p->n = n;
  p->rows = rows;
  std::mt19937 rng(42);
  const size_t bytes = edgelm::row_bytes(t, n) * static_cast<size_t>(rows);
  p->w.resize(bytes);
  if (t == DType::F32 || t == DType::F16 || t == DType::BF16) {
    std::normal_distribution<float> nd(0.0f, 0.02f);
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& v : row) v = nd(rng);
      quantize_row(t, row.data(), p->w.data() + r * edgelm::row_bytes(t, n), n);
    }
  } else {
    std::uniform_int_distribution<uint32_t> u32;
    for (size_t i = 0; i + 4 <= bytes; i += 4) {
      const uint32_t v = u32(rng);
      std::memcpy(&p->w[i], &v, 4);
    }
    const size_t bs = edgelm::dtype_info(t).type_size;
    const uint16_t d = fp32_to_fp16(0.01f);
    for (size_t off = 0; off < bytes; off += bs)
      for (int f : half_fields(t)) std::memcpy(&p->w[off + static_cast<size_t>(f)], &d, 2);
  }
  std::normal_distribution<float> nd(0.0f, 1.0f);
  p->xf.resize(static_cast<size_t>(n) * 32);
  for (auto& v : p->xf) v = nd(rng);
  return p;
}

// The most recent problem is kept: benchmarks are registered so that all runs
// on one (type, shape) are consecutive.
Problem& problem(DType t, int64_t n, int64_t rows) {
  static std::unique_ptr<Problem> cur;
  if (!cur || cur->type != t || cur->n != n || cur->rows != rows) {
    cur.reset();
    cur = make_problem(t, n, rows);
  }
  return *cur;
}

// Evicts [p, p + bytes) from every cache level.
void flush(const void* p, size_t bytes) {
  const auto* c = static_cast<const char*>(p);
#if defined(__x86_64__)
  for (size_t i = 0; i < bytes; i += 64) _mm_clflush(c + i);
  _mm_mfence();
#elif defined(__aarch64__)
  for (size_t i = 0; i < bytes; i += 64) asm volatile("dc civac, %0" ::"r"(c + i) : "memory");
  asm volatile("dsb ish" ::: "memory");
#else
  (void)c;
  (void)bytes;
#endif
}

void bm_gemm(benchmark::State& st, DType t, Isa isa, int64_t n, int64_t rows, int64_t n_tok,
             bool cold) {
  Problem& p = problem(t, n, rows);
  const size_t xs = act_row_bytes(t, n);
  std::vector<uint8_t> x(xs * static_cast<size_t>(n_tok));
  for (int64_t i = 0; i < n_tok; ++i)
    quantize_activation(isa, t, p.xf.data() + i * n, x.data() + i * xs, n);
  std::vector<float> y(static_cast<size_t>(rows * n_tok));
  const GemmArgs a{t, p.w.data(), edgelm::row_bytes(t, n), n, x.data(), xs, n_tok, y.data(), rows};
  for (auto _ : st) {
    if (cold) {
      st.PauseTiming();
      flush(p.w.data(), p.w.size());
      st.ResumeTiming();
    }
    gemm(isa, a, 0, rows);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(p.w.size()));
  st.counters["FLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(n * rows * n_tok),
                                             benchmark::Counter::kIsIterationInvariantRate);
}

void register_all() {
  const DType types[] = {DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::F16,
                         DType::F32,  DType::BF16, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                         DType::Q2_K, DType::Q3_K, DType::Q5_K};
  const struct { int64_t n, rows; } shapes[] = {{1536, 8960}, {8960, 1536}};
  for (DType t : types) {
    for (const auto& s : shapes) {
      for (Isa isa : supported_isas()) {
        for (int64_t n_tok : {1, 32}) {
          for (bool cold : {false, true}) {
            if (cold && n_tok != 1) continue;
            const std::string name = "gemm/" + std::string(edgelm::dtype_name(t)) + "/" +
                                     std::string(isa_name(isa)) + "/n=" + std::to_string(s.n) +
                                     "/rows=" + std::to_string(s.rows) +
                                     "/tok=" + std::to_string(n_tok) + (cold ? "/cold" : "");
            benchmark::RegisterBenchmark(name.c_str(), bm_gemm, t, isa, s.n, s.rows, n_tok, cold)
                ->Unit(benchmark::kMillisecond);
          }
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
