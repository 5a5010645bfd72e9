// Google Benchmark of the small per-ISA kernels around the gemms, for every
// ISA the CPU has, single thread, on Qwen2-1.5B shapes:
//   act/<format>:  quantize_activation of 32 rows of 1536 (prefill input)
//   kv/<op>/<type>: dot and axpy of a query row with 256 KV cache rows of 128,
//                  and kv_to_f32 of those rows (F32, F16, Q8_0 cache)
//   attn/<op>:     the attention tiles on 6 query rows (a GQA group) x 256
//                  key rows of 128: scores, exp_sum, max, accumulate, and
//                  scores_f16, accumulate_f16 (F16 rows read in place)
// All data stays in L1/L2: these measure the kernels' arithmetic, which is
// what changes when their code does.
//
//   build/edgelm_kernel_bench --benchmark_filter='^(act|kv|attn)/'

#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"

namespace {

using edgelm::DType;
using namespace edgelm::kernels;

constexpr int kRows = 256;  // KV rows (positions)
constexpr int kDim = 128;   // head dimension
constexpr int kGroup = 6;   // query rows sharing a KV head

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

void bm_act(benchmark::State& st, Isa isa, DType wtype) {
  const int64_t n = 1536, rows = 32;
  const std::vector<float> x = random_floats(static_cast<size_t>(n * rows), 1);
  const size_t xs = act_row_bytes(wtype, n);
  std::vector<uint8_t> dst(xs * rows);
  for (auto _ : st) {
    for (int64_t r = 0; r < rows; ++r)
      quantize_activation(isa, wtype, x.data() + r * n, dst.data() + r * xs, n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * n * rows * 4);
}

// kRows cache rows of kDim in `type`, from random values.
std::vector<uint8_t> kv_rows(DType type, unsigned seed) {
  const std::vector<float> f = random_floats(static_cast<size_t>(kRows * kDim), seed);
  const size_t rb = edgelm::row_bytes(type, kDim);
  std::vector<uint8_t> out(rb * kRows);
  for (int r = 0; r < kRows; ++r) store_kv(type, f.data() + r * kDim, out.data() + r * rb, kDim);
  return out;
}

void bm_kv_dot(benchmark::State& st, Isa isa, DType type) {
  const std::vector<uint8_t> k = kv_rows(type, 2);
  const std::vector<float> q = random_floats(kDim, 3);
  const size_t rb = edgelm::row_bytes(type, kDim);
  std::vector<float> s(kRows);
  for (auto _ : st) {
    for (int r = 0; r < kRows; ++r) s[r] = dot_f32_kv(isa, type, q.data(), k.data() + r * rb, kDim);
    benchmark::DoNotOptimize(s.data());
    benchmark::ClobberMemory();
  }
}

void bm_kv_axpy(benchmark::State& st, Isa isa, DType type) {
  const std::vector<uint8_t> v = kv_rows(type, 4);
  const std::vector<float> p = random_floats(kRows, 5);
  const size_t rb = edgelm::row_bytes(type, kDim);
  std::vector<float> o(kDim);
  for (auto _ : st) {
    for (int r = 0; r < kRows; ++r) axpy_kv(isa, type, p[r], v.data() + r * rb, o.data(), kDim);
    benchmark::DoNotOptimize(o.data());
    benchmark::ClobberMemory();
  }
}

void bm_kv_to_f32(benchmark::State& st, Isa isa, DType type) {
  const std::vector<uint8_t> k = kv_rows(type, 6);
  std::vector<float> dst(static_cast<size_t>(kRows * kDim));
  for (auto _ : st) {
    kv_to_f32(isa, type, k.data(), edgelm::row_bytes(type, kDim), kRows, dst.data(), kDim);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
}

void bm_attn_scores(benchmark::State& st, Isa isa) {
  const std::vector<float> q = random_floats(kGroup * kDim, 7), k = random_floats(kRows * kDim, 8);
  std::vector<float> s(static_cast<size_t>(kGroup * kRows));
  for (auto _ : st) {
    attn_scores(isa, q.data(), kGroup, k.data(), kRows, kDim, s.data(), kRows);
    benchmark::DoNotOptimize(s.data());
    benchmark::ClobberMemory();
  }
}

// The same two with F16 rows read in place (kv_rows' bytes, as halves).
const uint16_t* halves(const std::vector<uint8_t>& rows) { return reinterpret_cast<const uint16_t*>(rows.data()); }

void bm_attn_scores_f16(benchmark::State& st, Isa isa) {
  const std::vector<float> q = random_floats(kGroup * kDim, 7);
  const std::vector<uint8_t> k = kv_rows(DType::F16, 8);
  std::vector<float> s(static_cast<size_t>(kGroup * kRows));
  for (auto _ : st) {
    attn_scores_f16(isa, q.data(), kGroup, halves(k), kRows, kDim, s.data(), kRows);
    benchmark::DoNotOptimize(s.data());
    benchmark::ClobberMemory();
  }
}

void bm_attn_accumulate_f16(benchmark::State& st, Isa isa) {
  const std::vector<float> p = random_floats(kGroup * kRows, 10);
  const std::vector<uint8_t> v = kv_rows(DType::F16, 11);
  std::vector<float> o(static_cast<size_t>(kGroup * kDim));
  for (auto _ : st) {
    attn_accumulate_f16(isa, p.data(), kRows, kGroup, halves(v), kRows, kDim, o.data());
    benchmark::DoNotOptimize(o.data());
    benchmark::ClobberMemory();
  }
}

void bm_attn_exp_sum(benchmark::State& st, Isa isa) {
  // Scores below their maximum 0; each pass restores them (a copy of 6 KB,
  // small next to 1536 exps).
  std::vector<float> s0 = random_floats(static_cast<size_t>(kGroup * kRows), 9);
  for (auto& x : s0) x = -std::abs(x) * 4.0f;
  std::vector<float> s(s0.size());
  for (auto _ : st) {
    s = s0;
    float sum = 0.0f;
    for (int i = 0; i < kGroup; ++i) sum += attn_exp_sum(isa, s.data() + i * kRows, kRows, 0.0f);
    benchmark::DoNotOptimize(sum);
  }
}

// Each row's max, as a decode step finds it for every block of a group.
void bm_attn_max(benchmark::State& st, Isa isa) {
  const std::vector<float> s = random_floats(static_cast<size_t>(kGroup * kRows), 9);
  for (auto _ : st) {
    float m = 0.0f;
    for (int i = 0; i < kGroup; ++i) m += attn_max(isa, s.data() + i * kRows, kRows);
    benchmark::DoNotOptimize(m);
  }
}

void bm_attn_accumulate(benchmark::State& st, Isa isa) {
  const std::vector<float> p = random_floats(kGroup * kRows, 10),
                           v = random_floats(kRows * kDim, 11);
  std::vector<float> o(static_cast<size_t>(kGroup * kDim));
  for (auto _ : st) {
    attn_accumulate(isa, p.data(), kRows, kGroup, v.data(), kRows, kDim, o.data());
    benchmark::DoNotOptimize(o.data());
    benchmark::ClobberMemory();
  }
}

void register_act_attn() {
  for (Isa isa : supported_isas()) {
    const std::string tag = "/" + std::string(isa_name(isa));
    // Weight types standing for their activation formats: Q8_0, Q8_1, Q8_K.
    for (DType w : {DType::Q4_0, DType::Q4_1, DType::Q4_K}) {
      const std::string name = "act/" + std::string(edgelm::dtype_name(act_type(w))) + tag;
      benchmark::RegisterBenchmark(name.c_str(), bm_act, isa, w);
    }
    for (DType t : {DType::F32, DType::F16, DType::Q8_0}) {
      const std::string ty = "/" + std::string(edgelm::dtype_name(t)) + tag;
      benchmark::RegisterBenchmark(("kv/dot" + ty).c_str(), bm_kv_dot, isa, t);
      benchmark::RegisterBenchmark(("kv/axpy" + ty).c_str(), bm_kv_axpy, isa, t);
      benchmark::RegisterBenchmark(("kv/to_f32" + ty).c_str(), bm_kv_to_f32, isa, t);
    }
    benchmark::RegisterBenchmark(("attn/scores" + tag).c_str(), bm_attn_scores, isa);
    benchmark::RegisterBenchmark(("attn/exp_sum" + tag).c_str(), bm_attn_exp_sum, isa);
    benchmark::RegisterBenchmark(("attn/max" + tag).c_str(), bm_attn_max, isa);
    benchmark::RegisterBenchmark(("attn/accumulate" + tag).c_str(), bm_attn_accumulate, isa);
    benchmark::RegisterBenchmark(("attn/scores_f16" + tag).c_str(), bm_attn_scores_f16, isa);
    benchmark::RegisterBenchmark(("attn/accumulate_f16" + tag).c_str(), bm_attn_accumulate_f16, isa);
  }
}

// Registered before main runs (kernels_bench.cpp's main parses the flags).
[[maybe_unused]] const bool kRegistered = (register_act_attn(), true);

}  // namespace
