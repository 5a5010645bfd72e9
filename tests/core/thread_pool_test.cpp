#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

namespace edgelm {
namespace {

TEST(ThreadPool, RunGuidedCoversEveryItemOnceInShrinkingPieces) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 3, 7, 1000}) {
      std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
      std::mutex mu;
      std::vector<std::pair<int64_t, int64_t>> pieces;
      pool.run_guided(n, [&](int64_t b, int64_t e, int thread) {
        EXPECT_LT(b, e);
        EXPECT_GE(thread, 0);
        EXPECT_LT(thread, threads);
        for (int64_t x = b; x < e; ++x) seen[static_cast<size_t>(x)].fetch_add(1);
        std::lock_guard<std::mutex> lk(mu);
        pieces.emplace_back(b, e);
      });
      for (int64_t x = 0; x < n; ++x)
        EXPECT_EQ(seen[static_cast<size_t>(x)].load(), 1) << threads << " threads, n " << n << ", item " << x;
      if (threads == 1) {
        // One thread: the whole range at once.
        EXPECT_EQ(pieces.size(), n > 0 ? 1u : 0u);
        continue;
      }
      // Taken in order: each piece is ceil(remaining / threads) long, at
      // least one; so the last items (threads - 1 of them, or all when
      // there are no more than threads) go one by one.
      std::sort(pieces.begin(), pieces.end());
      const int64_t div = threads;
      for (const auto& [b, e] : pieces) {
        EXPECT_EQ(e - b, std::max<int64_t>(1, (n - b + div - 1) / div)) << threads << " " << n << " " << b;
      }
      const auto singles =
          std::count_if(pieces.begin(), pieces.end(), [](const auto& p) { return p.second - p.first == 1; });
      EXPECT_GE(singles, n <= div ? n : div - 1);
    }
  }
}

}  // namespace
}  // namespace edgelm
