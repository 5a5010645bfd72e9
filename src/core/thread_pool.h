// A persistent pool of worker threads for the forward pass. Threads are
// created once; a parallel region costs an atomic increment and a short spin,
// not a thread start or an allocation. Workers spin briefly after each region
// (the next matmul follows within microseconds during a step), then sleep.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "core/function_ref.h"

namespace edgelm {

class ThreadPool {
 public:
  // n_threads counts the calling thread: n_threads - 1 workers are started.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(task, thread) for every task in [0, n_tasks), spread over all
  // threads (the caller included); returns when all are done. thread is in
  // [0, size()). Not reentrant: one region at a time, from one thread.
  void run(int n_tasks, FunctionRef<void(int task, int thread)> fn);

  // Calls fn(begin, end, thread) over [0, n_items) in contiguous pieces,
  // guided: each thread takes the next ceil(remaining / size()) items (at
  // least one) until none are left, so pieces shrink from large to single
  // items and the threads finish within one item's time of each other.
  // Every item is in exactly one piece. Not reentrant, as run().
  //
  // Why not finer pieces: each piece of a decode step's weight rows starts
  // a new stream of reads from memory, whose first lines miss at full
  // latency before the prefetchers catch up. With ceil(remaining / (2 x
  // size())), two threads took about twice as many pieces, and decode was
  // slower: the Q4_K_M Qwen2-1.5B file at 60.4 against 64.8 tokens/s
  // (medians of 12 alternated runs, `edgelm bench --threads 2 -p 8 -n 128
  // -r 1`, every run behind; a busy machine, load 1.3-1.9). Q4_0, Q6_K and
  // Q8_0 were 1-7% behind too, and prompts even.
  void run_guided(int64_t n_items, FunctionRef<void(int64_t begin, int64_t end, int thread)> fn);

 private:
  void worker(int index);
  void work(int thread);

  int n_threads_;
  std::vector<std::thread> threads_;

  // The current region.
  FunctionRef<void(int, int)>* fn_ = nullptr;
  int n_tasks_ = 0;
  std::atomic<int> next_task_{0};
  std::atomic<int> pending_{0};  // workers not yet finished with this region

  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};
};

}  // namespace edgelm
