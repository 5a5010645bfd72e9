#include "serve/text_budget.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace edgelm::serve {
namespace {

using std::chrono::milliseconds;

// Waits until `n` takes wait in `b`.
void until_waiting(const TextBudget& b, size_t n) {
  for (int i = 0; i < 2000 && b.waiting() < n; ++i) std::this_thread::sleep_for(milliseconds(5));
  ASSERT_EQ(b.waiting(), n);
}

TEST(TextBudget, HoldsAtMostItsBytes) {
  TextBudget b(1000);
  EXPECT_EQ(b.take(600, 1, milliseconds(0)), 600u);
  EXPECT_EQ(b.take(500, 1, milliseconds(30)), 0u) << "over the budget";
  EXPECT_EQ(b.take(400, 1, milliseconds(0)), 400u);
  EXPECT_EQ(b.in_use(), 1000u);
  b.give(600);
  EXPECT_EQ(b.take(500, 1, milliseconds(0)), 500u);
  b.give(500);
  b.give(400);
  EXPECT_EQ(b.in_use(), 0u);
  // A text larger than the budget takes all of it, alone.
  EXPECT_EQ(b.take(5000, 1, milliseconds(0)), 1000u);
  EXPECT_EQ(b.take(1, 1, milliseconds(30)), 0u);
  b.give(1000);
}

TEST(TextBudget, WaitersGoByClassThenArrival) {
  TextBudget b(100);
  ASSERT_EQ(b.take(100, 1, milliseconds(0)), 100u);
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread> ts;
  const auto waiter = [&](int name, int cls) {
    ts.emplace_back([&, name, cls] {
      const uint64_t got = b.take(100, cls, milliseconds(10000));
      ASSERT_EQ(got, 100u);
      {
        std::lock_guard<std::mutex> lk(mu);
        order.push_back(name);
      }
      b.give(got);
    });
    until_waiting(b, ts.size());
  };
  waiter(1, 1);  // chat, first
  waiter(2, 1);  // chat, second
  waiter(3, 0);  // a sensor, last to come
  b.give(100);
  for (auto& t : ts) t.join();
  EXPECT_EQ(order, (std::vector<int>{3, 1, 2}));
}

TEST(TextBudget, ALargeTextAtTheHeadIsNotPassedBySmallOnes) {
  TextBudget b(100);
  ASSERT_EQ(b.take(60, 1, milliseconds(0)), 60u);
  std::thread large([&] {
    const uint64_t got = b.take(100, 1, milliseconds(10000));
    EXPECT_EQ(got, 100u);
    b.give(got);
  });
  until_waiting(b, 1);
  // Room for 40 bytes, but the large text waits ahead of this one.
  EXPECT_EQ(b.take(10, 1, milliseconds(50)), 0u);
  b.give(60);
  large.join();
  EXPECT_EQ(b.take(10, 1, milliseconds(0)), 10u);
  b.give(10);
}

TEST(TextBudget, AWaiterThatGivesUpLetsTheNextGo) {
  TextBudget b(100);
  ASSERT_EQ(b.take(60, 1, milliseconds(0)), 60u);
  std::thread large([&] { EXPECT_EQ(b.take(100, 1, milliseconds(300)), 0u); });
  until_waiting(b, 1);
  uint64_t small = 0;
  std::thread next([&] { small = b.take(30, 1, milliseconds(10000)); });
  large.join();
  next.join();
  EXPECT_EQ(small, 30u) << "the small text fits once the large one stops waiting";
  b.give(30);
  b.give(60);
}

TEST(TextBudget, StopWakesWaiters) {
  TextBudget b(100);
  ASSERT_EQ(b.take(100, 1, milliseconds(0)), 100u);
  const auto start = std::chrono::steady_clock::now();
  std::thread w([&] { EXPECT_EQ(b.take(1, 1, milliseconds(30000)), 0u); });
  until_waiting(b, 1);
  b.stop();
  w.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(b.take(1, 1, milliseconds(0)), 0u) << "no take after stop";
}

TEST(TextBudget, APermitGivesBackWhatItTook) {
  TextBudget b(100);
  {
    TextPermit p(b, 0, 1, milliseconds(0));  // an empty body still takes its turn
    EXPECT_TRUE(p.ok());
    EXPECT_EQ(b.in_use(), 1u);
    TextPermit q(b, 500, 1, milliseconds(20));
    EXPECT_FALSE(q.ok()) << "all 100 bytes are not free";
    p.release();
    EXPECT_EQ(b.in_use(), 0u);
  }
  EXPECT_EQ(b.in_use(), 0u);
}

}  // namespace
}  // namespace edgelm::serve
