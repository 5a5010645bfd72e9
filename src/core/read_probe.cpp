#include "core/read_probe.h"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace edgelm {

namespace {

using Clock = std::chrono::steady_clock;
using secs = std::chrono::duration<double>;

#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t sum_avx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  // Unsigned: the lanes wrap, which a signed sum may not (UBSan).
  return static_cast<uint64_t>(_mm256_extract_epi64(a0, 0)) +
         static_cast<uint64_t>(_mm256_extract_epi64(a0, 3));
}

// kMode 0: plain loads, 1: plus a prefetch 2 KiB ahead, 2: streaming loads.
template <int kMode>
__attribute__((target("avx512f"))) uint64_t sum_avx512(const uint8_t* p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  // (A macro, not a lambda: a lambda would not inherit the target attribute.)
#define EDGELM_LOAD512(q) \
  (kMode == 2 ? _mm512_stream_load_si512(const_cast<uint8_t*>(q)) : _mm512_load_si512(q))
  for (size_t i = 0; i < n; i += 256) {
    if constexpr (kMode == 1) {
      // Past the end of the buffer only on the last 2 KiB; a prefetch never faults.
      for (int l = 0; l < 4; ++l)
        _mm_prefetch(reinterpret_cast<const char*>(p + i + 2048 + 64 * l), _MM_HINT_T0);
    }
    a0 = _mm512_add_epi64(a0, EDGELM_LOAD512(p + i));
    a1 = _mm512_add_epi64(a1, EDGELM_LOAD512(p + i + 64));
    a2 = _mm512_add_epi64(a2, EDGELM_LOAD512(p + i + 128));
    a3 = _mm512_add_epi64(a3, EDGELM_LOAD512(p + i + 192));
  }
#undef EDGELM_LOAD512
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  uint64_t s = 0;
  for (uint64_t v : lanes) s += v;
  return s;
}
#endif

uint64_t sum_scalar(const uint8_t* p, size_t n) {
  const uint64_t* a = reinterpret_cast<const uint64_t*>(p);
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i < n / 8; i += 4) {
    s0 += a[i];
    s1 += a[i + 1];
    s2 += a[i + 2];
    s3 += a[i + 3];
  }
  return s0 + s1 + s2 + s3;
}

}  // namespace

std::string_view read_method_name(ReadMethod m) {
  switch (m) {
    case ReadMethod::Avx2:
      return "avx2 loads";
    case ReadMethod::Avx512:
      return "avx512 loads";
    case ReadMethod::Avx512Prefetch:
      return "avx512 loads + prefetch 2 KiB ahead";
    case ReadMethod::Avx512Stream:
      return "avx512 streaming loads (movntdqa)";
    default:
      return "64-bit loads";
  }
}

std::vector<ReadMethod> read_methods() {
  std::vector<ReadMethod> m;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) m.push_back(ReadMethod::Avx2);
  if (__builtin_cpu_supports("avx512f")) {
    m.push_back(ReadMethod::Avx512);
    m.push_back(ReadMethod::Avx512Prefetch);
    m.push_back(ReadMethod::Avx512Stream);
  }
#endif
  m.push_back(ReadMethod::Scalar);
  return m;
}

uint64_t sum_bytes(ReadMethod m, const uint8_t* p, size_t n) {
  switch (m) {
#if defined(__x86_64__)
    case ReadMethod::Avx2:
      return sum_avx2(p, n);
    case ReadMethod::Avx512:
      return sum_avx512<0>(p, n);
    case ReadMethod::Avx512Prefetch:
      return sum_avx512<1>(p, n);
    case ReadMethod::Avx512Stream:
      return sum_avx512<2>(p, n);
#endif
    default:
      return sum_scalar(p, n);
  }
}

uint64_t read_share(ReadMethod m, bool chunks, const uint8_t* p, size_t bytes, int t, int threads) {
  constexpr size_t kChunk = 256 * 1024;
  uint64_t s = 0;
  if (chunks) {
    for (size_t off = static_cast<size_t>(t) * kChunk; off < bytes;
         off += static_cast<size_t>(threads) * kChunk)
      s += sum_bytes(m, p + off, std::min(kChunk, bytes - off));
  } else {
    const size_t per = bytes / static_cast<size_t>(threads);
    s = sum_bytes(m, p + per * static_cast<size_t>(t), per);
  }
  return s;
}

size_t read_pass_bytes(size_t n, int threads) {
  const size_t step = 256 * static_cast<size_t>(std::max(1, threads));
  return n / step * step;
}

namespace {

struct Way {
  ReadMethod method;
  bool chunks;
};

// The best pass in GB/s of each way over [p, p + bytes) (bytes as
// read_pass_bytes gives, > 0), `passes` passes round-robin over the ways,
// so a burst of load from elsewhere does not fall on one way only. The
// threads are started once and wait at a spinning barrier, so no thread
// start is timed.
std::vector<double> best_passes(const std::vector<Way>& ways, const uint8_t* p, size_t bytes,
                                int threads, int passes) {
  std::atomic<int> go{0}, done{0};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> sink{0};
  Way way{};
  auto share = [&](int t) {
    sink.fetch_add(read_share(way.method, way.chunks, p, bytes, t, threads),
                   std::memory_order_relaxed);
  };
  std::vector<std::thread> ts;
  for (int t = 1; t < threads; ++t) {
    ts.emplace_back([&, t] {
      int seen = 0;
      for (;;) {
        while (go.load(std::memory_order_acquire) == seen) std::this_thread::yield();
        seen = go.load(std::memory_order_acquire);
        if (stop.load()) return;
        share(t);
        done.fetch_add(1, std::memory_order_acq_rel);
      }
    });
  }
  std::vector<double> best(ways.size(), 0.0);
  for (int pass = 0; pass < passes; ++pass) {
    for (size_t j = 0; j < ways.size(); ++j) {
      way = ways[j];
      done.store(0);
      const auto t0 = Clock::now();
      go.fetch_add(1, std::memory_order_acq_rel);
      share(0);
      while (done.load(std::memory_order_acquire) != threads - 1) std::this_thread::yield();
      best[j] =
          std::max(best[j], static_cast<double>(bytes) / secs(Clock::now() - t0).count() / 1e9);
    }
  }
  stop.store(true);
  go.fetch_add(1, std::memory_order_acq_rel);
  for (auto& th : ts) th.join();
  if (sink.load() == 42) fmt::print("");  // keeps the sums alive
  return best;
}

}  // namespace

BandwidthResult probe_read(const uint8_t* p, size_t bytes, int threads) {
  BandwidthResult res;
  threads = std::max(1, threads);
  bytes = read_pass_bytes(bytes, threads);
  if (bytes == 0) return res;
  std::vector<Way> ways;
  for (ReadMethod m : read_methods())
    for (bool chunks : {false, true}) ways.push_back({m, chunks});
  const std::vector<double> best = best_passes(ways, p, bytes, threads, 4);
  for (size_t j = 0; j < ways.size(); ++j) {
    std::string name =
        fmt::format("{}, {}", read_method_name(ways[j].method),
                    ways[j].chunks ? "256 KiB chunks in turn" : "one share per thread");
    if (best[j] > res.best_gbs) {
      res.best_gbs = best[j];
      res.best = name;
      res.best_method = ways[j].method;
      res.best_chunks = ways[j].chunks;
    }
    res.all.emplace_back(std::move(name), best[j]);
  }
  return res;
}

double read_gbs(ReadMethod m, bool chunks, const uint8_t* p, size_t bytes, int threads,
                int passes) {
  threads = std::max(1, threads);
  bytes = read_pass_bytes(bytes, threads);
  if (bytes == 0 || passes < 1) return 0;
  return best_passes({{m, chunks}}, p, bytes, threads, passes)[0];
}

}  // namespace edgelm
