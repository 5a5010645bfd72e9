// How much request text is being prepared at once (parsed, rendered with a
// chat template, tokenized). That work holds many times its text in memory
// while it runs (a tokenizer's symbols and heap, the ids, the copies), and
// every HTTP worker may do it at once: 32 chat requests of 200 kB arriving
// together raised the peak resident size by 330 MB. The budget bounds the
// text in preparation to a number of bytes the memory plan counts
// (server_buffer_bytes); a request takes its body's size of it (at most all
// of it) and gives it back when its prompt is built.
//
// Waiters are served in order of their class (lower first: sensors before
// chat), then of arrival, so a large request is not starved by small ones.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>
#include <utility>

namespace edgelm::serve {

class TextBudget {
 public:
  explicit TextBudget(uint64_t bytes) : capacity_(bytes) {}

  uint64_t capacity() const { return capacity_; }
  // Takes min(n, capacity) bytes, waiting up to `wait` for its turn and
  // room: the bytes taken, or 0 if not had in time or once stopped.
  uint64_t take(uint64_t n, int cls, std::chrono::milliseconds wait);
  void give(uint64_t n);
  // Wakes every waiter; takes fail from now on.
  void stop();
  uint64_t in_use() const;
  size_t waiting() const;

 private:
  const uint64_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t used_ = 0;
  uint64_t tickets_ = 0;
  std::set<std::pair<int, uint64_t>> waiting_;  // (class, ticket)
  bool stopped_ = false;
};

// Holds bytes of a TextBudget for its scope.
class TextPermit {
 public:
  TextPermit(TextBudget& b, uint64_t n, int cls, std::chrono::milliseconds wait)
      : b_(b), n_(b.take(n == 0 ? 1 : n, cls, wait)) {}
  ~TextPermit() { release(); }
  TextPermit(const TextPermit&) = delete;
  TextPermit& operator=(const TextPermit&) = delete;
  bool ok() const { return n_ > 0; }
  void release() {
    if (n_ > 0) b_.give(n_);
    n_ = 0;
  }

 private:
  TextBudget& b_;
  uint64_t n_;
};

}  // namespace edgelm::serve
