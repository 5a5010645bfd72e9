#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#define EDGELM_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define EDGELM_PAUSE() asm volatile("yield")
#else
#define EDGELM_PAUSE() ((void)0)
#endif

namespace edgelm {

namespace {
// How long an idle worker spins before sleeping. Steps run dozens of regions
// back to back; between steps the worker sleeps and leaves the core to others.
constexpr auto kSpin = std::chrono::microseconds(200);
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  threads_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::work(int thread) {
  for (;;) {
    int t = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (t >= n_tasks_) break;
    (*fn_)(t, thread);
  }
}

void ThreadPool::run(int n_tasks, FunctionRef<void(int, int)> fn) {
  if (n_tasks <= 0) return;
  if (n_threads_ == 1 || n_tasks == 1) {
    for (int t = 0; t < n_tasks; ++t) fn(t, 0);
    return;
  }
  fn_ = &fn;
  n_tasks_ = n_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  // seq_cst on both sides (here and in worker) so a worker about to sleep
  // either sees the new generation or is seen as a sleeper and notified.
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lk(mu_);
    cv_.notify_all();
  }
  work(0);
  // Usually the others finish within microseconds; if one was descheduled
  // (more threads than free cores), yield the core to it instead of spinning.
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < 4096) EDGELM_PAUSE();
    else std::this_thread::yield();
  }
  fn_ = nullptr;
}

void ThreadPool::run_guided(int64_t n_items, FunctionRef<void(int64_t, int64_t, int)> fn) {
  if (n_items <= 0) return;
  if (n_threads_ == 1) {
    fn(0, n_items, 0);
    return;
  }
  const int64_t div = n_threads_;  // thread_pool.h: why not finer
  std::atomic<int64_t> next{0};
  run(n_threads_, [&](int, int thread) {
    for (;;) {
      int64_t begin = next.load(std::memory_order_relaxed), take = 0;
      do {
        if (begin >= n_items) return;
        take = std::max<int64_t>(1, (n_items - begin + div - 1) / div);
      } while (!next.compare_exchange_weak(begin, begin + take, std::memory_order_relaxed));
      fn(begin, begin + take, thread);
    }
  });
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin for the next region, then sleep.
    auto start = std::chrono::steady_clock::now();
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen) {
      EDGELM_PAUSE();
      if (++spins % 256 == 0 && std::chrono::steady_clock::now() - start > kSpin) {
        std::unique_lock<std::mutex> lk(mu_);
        sleepers_.fetch_add(1);
        cv_.wait(lk, [&] { return generation_.load() != seen; });
        sleepers_.fetch_sub(1);
        break;
      }
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    work(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace edgelm
