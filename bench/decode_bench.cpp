// Google Benchmark of what one decode step runs, on one thread (CPU time per
// step, robust on a shared machine): the interleaved gemm with one
// activation row, and attention at depth.
//
// Attention: one token of one slot over
// `depth` cached positions, every layer of a Qwen2-1.5B-shaped F16 cache
// (12 query heads, 2 KV heads of 128; 28 layers, 59 MB at 2048 positions, so
// the cache does not stay in L3 between layers, as in a real step), mapped
// as the server maps it (core/region.h: huge pages where the kernel has them).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "core/read_probe.h"
#include "core/region.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "model/attention.h"

namespace edgelm {
namespace {

void bm_attend_decode(benchmark::State& st) {
  const int depth = static_cast<int>(st.range(0));
  const int n_threads = static_cast<int>(st.range(1));
  // Slots visited in turn, one per iteration: 8 x 59 MB at depth 2048 is
  // past any L3, so every step reads its cache from memory, as a real step
  // does after streaming 0.9 GB of weights.
  const int n_slots = static_cast<int>(st.range(2));
  const int layers = 28;
  AttnShape sh;
  sh.n_heads = 12;
  sh.n_kv_heads = 2;
  sh.head_dim = 128;
  sh.head_dim_v = 128;
  KvView kv = KvView::make(DType::F16, n_slots, layers, depth, sh.n_kv_heads, sh.head_dim, sh.head_dim_v);
  // Mapped as the server maps its cache (Region: huge pages where the
  // kernel gives them).
  auto region = Region::map(kv.bytes(), "KV cache");
  if (!region.ok()) {
    st.SkipWithError(region.message().c_str());
    return;
  }
  std::span<uint8_t> cache(region.value().data(), region.value().size());
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(sh.n_kv_heads * sh.head_dim));
  const size_t slot_bytes = cache.size() / static_cast<size_t>(n_slots);
  for (size_t off = 0; off < slot_bytes; off += kv.k_head) {
    for (int c = 0; c < sh.head_dim; ++c) row[static_cast<size_t>(c)] = u(rng);
    kernels::store_kv(kv.type, row.data(), cache.data() + off, sh.head_dim);
  }
  for (int s = 1; s < n_slots; ++s) std::memcpy(cache.data() + s * slot_bytes, cache.data(), slot_bytes);
  kv.base = cache.data();
  std::vector<float> q(static_cast<size_t>(sh.n_heads * sh.head_dim)), out(q.size());
  for (float& x : q) x = u(rng);
  ThreadPool pool(n_threads);
  std::vector<float> threads(attn_tile_thread_floats(sh) * static_cast<size_t>(n_threads));
  std::vector<float> splits(attn_split_floats(sh, n_threads));
  std::vector<int32_t> runs(2);
  AttnScratch sc{threads.data(), attn_tile_thread_floats(sh), splits.data(), runs.data()};
  const auto isa = static_cast<kernels::Isa>(st.range(3));
  int slot = 0;
  for (auto _ : st) {
    const BatchToken bt{0, depth - 1, slot, true};
    for (int l = 0; l < layers; ++l) attend_tiles(sh, kv, l, {&bt, 1}, q.data(), out.data(), sc, pool, isa);
    benchmark::DoNotOptimize(out.data());
    slot = (slot + 1) % n_slots;
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(slot_bytes));
}

// Arguments: depth, threads, slots, ISA (kernels::Isa: each SIMD one this
// CPU runs, so an AVX-512 machine also shows what its AVX2 tiles do, as an
// AVX2-only CPU would run them). One thread: CPU time; two: real time, as a
// decode step spreads a layer's two KV heads over the pool. One slot leaves
// the cache in L3 between iterations where L3 is large; eight do not.
template <int kThreads>
void attend_args(benchmark::internal::Benchmark* b) {
  for (kernels::Isa isa : kernels::supported_isas()) {
    if (isa == kernels::Isa::Scalar) continue;
    const int i = static_cast<int>(isa);
    if constexpr (kThreads == 1) {
      b->Args({512, 1, 1, i})->Args({2048, 1, 1, i})->Args({2048, 1, 8, i});
    } else {
      b->Args({2048, kThreads, 1, i})->Args({2048, kThreads, 8, i});
    }
  }
}
BENCHMARK(bm_attend_decode)->Apply(attend_args<1>)->Unit(benchmark::kMillisecond);
BENCHMARK(bm_attend_decode)->Apply(attend_args<2>)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace edgelm

// Decode-shaped gemm through the interleaved layout: one activation row (or
// two) against `mats` Q4_0 matrices of 8960 x 1536 (62 MB in all, past L3),
// one after another as a step reads its layers. One thread: CPU time.
namespace edgelm {
namespace {
// rows x n weights of type t, quantized from uniform values in [-1, 1).
std::vector<uint8_t> random_rows(DType t, int64_t n, int64_t rows, std::mt19937& rng) {
  const size_t rb = row_bytes(t, n);
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> f(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& x : f) x = u(rng);
    kernels::quantize_row(t, f.data(), w.data() + r * rb, n);
  }
  return w;
}

// fn(type, isa) for each weight type the benchmarks cover and each ISA of
// this CPU whose kernels read it in the interleaved layout.
template <class Fn>
void each_interleaved(Fn&& fn) {
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K})
    for (kernels::Isa isa : kernels::supported_isas())
      if (kernels::preferred_layout(isa, t, 8960, 1536) == kernels::Layout::Interleave16)
        fn(static_cast<int>(t), static_cast<int>(isa));
}

// `mats` packed copies of one rows x n matrix of type t, and n_x activation
// rows of n, quantized for isa.
struct GemvInputs {
  DType t = DType::F32;
  int64_t n = 0, rows = 0;
  size_t rb = 0, pb = 0, xs = 0;  // bytes of a row, a packed matrix, an activation row
  std::vector<uint8_t> packed, x;

  // The gemm of packed copy m against the first n_tok activation rows, into y.
  kernels::GemmArgs args(int m, int n_tok, float* y) const {
    return {t,    packed.data() + m * pb,       rb, n, x.data(), xs, n_tok, y,
            rows, kernels::Layout::Interleave16};
  }
};
GemvInputs gemv_inputs(DType t, kernels::Isa isa, int64_t n, int64_t rows, int mats, int n_x) {
  GemvInputs in;
  in.t = t;
  in.n = n;
  in.rows = rows;
  in.rb = row_bytes(t, n);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> f(static_cast<size_t>(n));
  const std::vector<uint8_t> src = random_rows(t, n, rows, rng);
  in.pb = kernels::packed_bytes(t, kernels::Layout::Interleave16, rows, n);
  in.packed.resize(in.pb * static_cast<size_t>(mats));
  for (int m = 0; m < mats; ++m)
    kernels::pack_rows(t, kernels::Layout::Interleave16, src.data(), in.packed.data() + m * in.pb,
                       n, 0, rows);
  in.xs = kernels::act_row_bytes(t, n);
  in.x.resize(in.xs * static_cast<size_t>(n_x));
  for (int j = 0; j < n_x; ++j) {
    for (float& v : f) v = u(rng);
    kernels::quantize_activation(isa, t, f.data(), in.x.data() + j * in.xs, n);
  }
  return in;
}

void bm_gemv_i16(benchmark::State& st) {
  const int n_tok = static_cast<int>(st.range(0));
  const DType t = static_cast<DType>(st.range(1));
  const int64_t n = 1536, rows = 8960;
  const int mats = 8;
  const kernels::Isa isa = static_cast<kernels::Isa>(st.range(2));
  const GemvInputs in = gemv_inputs(t, isa, n, rows, mats, 2);
  std::vector<float> y(static_cast<size_t>(rows * 2));
  for (auto _ : st) {
    for (int m = 0; m < mats; ++m) kernels::gemm(isa, in.args(m, n_tok, y.data()), 0, rows);
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(in.pb * mats));
}
void gemv_args(benchmark::internal::Benchmark* b) {
  each_interleaved([b](int t, int isa) {
    for (int n_tok : {1, 2}) b->Args({n_tok, t, isa});
  });
}
BENCHMARK(bm_gemv_i16)->Apply(gemv_args)->Unit(benchmark::kMillisecond);

// The decode gemm's own ceiling on one core: one activation row against a
// matrix of 256 x n (Q8_0 at n = 1536: 408 KiB) that stays in L2 from one
// pass to the next, so the bytes come as fast as the core asks for them.
// Its bytes_per_second beside a read probe's per-thread share says whether
// a decode at two threads can be held back by the kernel rather than by
// memory (each thread must take half of the probe's rate).
//
//   build/edgelm_kernel_bench --benchmark_filter=gemv_i16_warm
void bm_gemv_i16_warm(benchmark::State& st) {
  const DType t = static_cast<DType>(st.range(0));
  const kernels::Isa isa = static_cast<kernels::Isa>(st.range(1));
  const int64_t n = st.range(2), rows = 256;
  const GemvInputs in = gemv_inputs(t, isa, n, rows, 1, 1);
  std::vector<float> y(static_cast<size_t>(rows));
  const kernels::GemmArgs a = in.args(0, 1, y.data());
  for (auto _ : st) {
    kernels::gemm(isa, a, 0, rows);
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(in.pb));
}
BENCHMARK(bm_gemv_i16_warm)->Apply([](benchmark::internal::Benchmark* b) {
  each_interleaved([b](int t, int isa) {
    for (int64_t n : {1536, 8960}) b->Args({t, isa, n});
  });
});

// The same gemms, and the down projection's shape (1536 x 8960), on a pool
// of two threads, rows handed out in units of 32 as a decode step hands
// them out (Forward::matmuls, ThreadPool::run_guided): how the formats'
// one-row paths share the memory of two cores. Real time.
void bm_gemv_i16_pool(benchmark::State& st) {
  const DType t = static_cast<DType>(st.range(0));
  const kernels::Isa isa = static_cast<kernels::Isa>(st.range(1));
  const int n_threads = static_cast<int>(st.range(2));
  const int64_t n = st.range(3), rows = n == 1536 ? 8960 : 1536;
  const int mats = 8;
  const GemvInputs in = gemv_inputs(t, isa, n, rows, mats, 1);
  std::vector<float> y(static_cast<size_t>(rows));
  ThreadPool pool(n_threads);
  for (auto _ : st) {
    for (int m = 0; m < mats; ++m) {
      const kernels::GemmArgs a = in.args(m, 1, y.data());
      pool.run_guided(
          rows / 32, [&](int64_t u0, int64_t u1, int) { kernels::gemm(isa, a, u0 * 32, u1 * 32); });
    }
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(in.pb * mats));
}
void gemv_pool_args(benchmark::internal::Benchmark* b) {
  each_interleaved([b](int t, int isa) {
    for (int64_t n : {1536, 8960}) b->Args({t, isa, 2, n});
  });
}
BENCHMARK(bm_gemv_i16_pool)->Apply(gemv_pool_args)->UseRealTime()->Unit(benchmark::kMillisecond);

// Every weight matrix of a Qwen2-1.5B decode step's 28 layers, in the
// step's order and runs (QKV, output, gate and up, down; 0.7 GB in Q4_0),
// one activation row each: the layers' weights of a step without the rest
// of it. Mapped as the engine maps packed weights (Model::pack_for: a
// Region, huge pages where the kernel gives them).
struct LayerStack {
  struct Shape {
    int64_t rows, n;
  };
  static constexpr Shape kShapes[] = {{2048, 1536}, {1536, 1536}, {17920, 1536}, {1536, 8960}};
  static constexpr int kLayers = 28;
  DType t;
  Region region;
  size_t layer_bytes = 0;
  size_t at[4] = {};
  std::vector<uint8_t> x;
  std::vector<float> f, y;

  static Result<LayerStack> make(DType t) {
    LayerStack s;
    s.t = t;
    for (int k = 0; k < 4; ++k) {
      s.at[k] = s.layer_bytes;
      s.layer_bytes +=
          kernels::packed_bytes(t, kernels::Layout::Interleave16, kShapes[k].rows, kShapes[k].n);
    }
    EDGELM_ASSIGN(s.region, Region::map(s.layer_bytes * kLayers, "packed weights"));
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int k = 0; k < 4; ++k) {
      const std::vector<uint8_t> src = random_rows(t, kShapes[k].n, kShapes[k].rows, rng);
      kernels::pack_rows(t, kernels::Layout::Interleave16, src.data(), s.region.data() + s.at[k],
                         kShapes[k].n, 0, kShapes[k].rows);
    }
    for (int l = 1; l < kLayers; ++l)
      std::memcpy(s.region.data() + l * s.layer_bytes, s.region.data(), s.layer_bytes);
    s.x.resize(kernels::act_row_bytes(t, 8960));
    s.f.resize(8960);
    s.y.resize(17920);
    for (float& v : s.f) v = u(rng);
    return s;
  }

  // One step's products, rows handed out as a decode step hands them out.
  void pass(kernels::Isa isa, ThreadPool& pool) {
    for (int l = 0; l < kLayers; ++l) {
      for (int k = 0; k < 4; ++k) {
        const Shape& sh = kShapes[k];
        kernels::quantize_activation(isa, t, f.data(), x.data(), sh.n);
        const kernels::GemmArgs a{t,
                                  region.data() + l * layer_bytes + at[k],
                                  row_bytes(t, sh.n),
                                  sh.n,
                                  x.data(),
                                  kernels::act_row_bytes(t, sh.n),
                                  1,
                                  y.data(),
                                  sh.rows,
                                  kernels::Layout::Interleave16};
        pool.run_guided(sh.rows / 32, [&](int64_t u0, int64_t u1, int) {
          kernels::gemm(isa, a, u0 * 32, u1 * 32);
        });
      }
    }
  }
};

// The stack on a pool of threads. Real time.
void bm_decode_layers_pool(benchmark::State& st) {
  const DType t = static_cast<DType>(st.range(0));
  const kernels::Isa isa = static_cast<kernels::Isa>(st.range(1));
  auto stack = LayerStack::make(t);
  if (!stack.ok()) {
    st.SkipWithError(stack.message().c_str());
    return;
  }
  ThreadPool pool(static_cast<int>(st.range(2)));
  for (auto _ : st) {
    stack->pass(isa, pool);
    benchmark::DoNotOptimize(stack->y.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) *
                       static_cast<int64_t>(stack->region.size()));
}
void decode_layers_args(benchmark::internal::Benchmark* b) {
  each_interleaved([b](int t, int isa) {
    for (int th : {1, 2}) b->Args({t, isa, th});
  });
}
BENCHMARK(bm_decode_layers_pool)
    ->Apply(decode_layers_args)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The stack against a plain read of the same bytes, alternated: each
// iteration reads the stack's region once by the best of read_probe's ways
// (found on this region before the loop: method and split) and then runs
// the products over it. The time is the products' alone (manual time);
// `vs_read` is the median over iterations of (read time / products' time),
// the share of a plain read's speed the products reach on the very bytes
// they read. On a VM two buffers of one process can read 10-25% apart and
// the host's phases move both, so a ratio taken pass by pass on one buffer
// says more than the products' time beside a probe of another buffer. The
// read is read_probe's read_gbs, one thread per share (started before its
// timing), so no iteration's read runs both shares on one thread.
// `vs_loads` is the same ratio against a read by plain loads (the widest
// this CPU has, one share per thread), taken in the same iteration: on a
// host whose streaming loads read faster than plain ones, it says how much
// of the gap to vs_read lies in the way of reading alone.
//
//   build/edgelm_kernel_bench --benchmark_filter='decode_layers_vs_read/(2|12)/2/2/'
void bm_decode_layers_vs_read(benchmark::State& st) {
  const DType t = static_cast<DType>(st.range(0));
  const kernels::Isa isa = static_cast<kernels::Isa>(st.range(1));
  const int n_threads = static_cast<int>(st.range(2));
  auto stack = LayerStack::make(t);
  if (!stack.ok()) {
    st.SkipWithError(stack.message().c_str());
    return;
  }
  ThreadPool pool(n_threads);
  const uint8_t* p = stack->region.data();
  const BandwidthResult how = probe_read(p, stack->region.size(), n_threads);
  const double region_bytes = static_cast<double>(stack->region.size());
  // Plain loads, the widest this CPU has: what a kernel that loads its
  // weights (no streaming loads, no requests ahead) is held to.
  const std::vector<ReadMethod> ways = read_methods();
  const ReadMethod plain =
      std::find(ways.begin(), ways.end(), ReadMethod::Avx512) != ways.end() ? ReadMethod::Avx512
      : std::find(ways.begin(), ways.end(), ReadMethod::Avx2) != ways.end() ? ReadMethod::Avx2
                                                                            : ReadMethod::Scalar;
  std::vector<double> ratio, ratio_loads;
  using Clock = std::chrono::steady_clock;
  for (auto _ : st) {
    const double loads =
        region_bytes / (read_gbs(plain, false, p, stack->region.size(), n_threads, 1) * 1e9);
    const double read =
        region_bytes /
        (read_gbs(how.best_method, how.best_chunks, p, stack->region.size(), n_threads, 1) * 1e9);
    const auto t1 = Clock::now();
    stack->pass(isa, pool);
    const auto t2 = Clock::now();
    const double products = std::chrono::duration<double>(t2 - t1).count();
    st.SetIterationTime(products);
    ratio.push_back(read / products);
    ratio_loads.push_back(loads / products);
    benchmark::DoNotOptimize(stack->y.data());
  }
  std::sort(ratio.begin(), ratio.end());
  std::sort(ratio_loads.begin(), ratio_loads.end());
  if (!ratio.empty()) st.counters["vs_read"] = ratio[ratio.size() / 2];
  if (!ratio_loads.empty()) st.counters["vs_loads"] = ratio_loads[ratio_loads.size() / 2];
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) *
                       static_cast<int64_t>(stack->region.size()));
  st.SetLabel(how.best);
}
BENCHMARK(bm_decode_layers_vs_read)
    ->Apply(decode_layers_args)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
}  // namespace
}  // namespace edgelm

// Prompt-shaped gemm through the interleaved layout: n_tok activation rows
// against one matrix (rows x n) of each MLP shape of Qwen2-1.5B, warm (the
// prompt tiles read a group's weights once per chunk of tokens and the
// activations from L2). One thread: CPU time; FLOP/s = 2 n rows n_tok.
//
//   build/edgelm_kernel_bench --benchmark_filter=gemm_i16_prompt --benchmark_repetitions=5
namespace edgelm {
namespace {
void bm_gemm_i16_prompt(benchmark::State& st) {
  const int n_tok = static_cast<int>(st.range(0));
  const DType t = static_cast<DType>(st.range(1));
  const kernels::Isa isa = static_cast<kernels::Isa>(st.range(2));
  const int64_t n = st.range(3), rows = n == 1536 ? 8960 : 1536;
  const size_t rb = row_bytes(t, n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> f(static_cast<size_t>(n));
  const std::vector<uint8_t> src = random_rows(t, n, rows, rng);
  std::vector<uint8_t> packed(kernels::packed_bytes(t, kernels::Layout::Interleave16, rows, n));
  kernels::pack_rows(t, kernels::Layout::Interleave16, src.data(), packed.data(), n, 0, rows);
  const size_t xs = kernels::act_row_bytes(t, n);
  std::vector<uint8_t> x(xs * static_cast<size_t>(n_tok));
  for (int j = 0; j < n_tok; ++j) {
    for (float& v : f) v = u(rng);
    kernels::quantize_activation(isa, t, f.data(), x.data() + j * xs, n);
  }
  std::vector<float> y(static_cast<size_t>(rows * n_tok));
  const kernels::GemmArgs a{t, packed.data(), rb, n, x.data(), xs, n_tok, y.data(), rows,
                            kernels::Layout::Interleave16};
  for (auto _ : st) {
    kernels::gemm(isa, a, 0, rows);
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["FLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(n * rows * n_tok),
                                             benchmark::Counter::kIsIterationInvariantRate);
}
void gemm_prompt_args(benchmark::internal::Benchmark* b) {
  each_interleaved([b](int t, int isa) {
    for (int64_t n : {1536, 8960}) b->Args({64, t, isa, n});
  });
}
BENCHMARK(bm_gemm_i16_prompt)->Apply(gemm_prompt_args)->Unit(benchmark::kMillisecond);
}  // namespace
}  // namespace edgelm
