// The HTTP worker pool: its threads run below the engine's CPU priority.
#include "serve/http_pool.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <future>

namespace edgelm::serve {
namespace {

int thread_nice() {
  errno = 0;
  const int n = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  EXPECT_EQ(errno, 0);
  return n;
}

int nice_of_a_job(WorkerPool& pool) {
  std::promise<int> seen;
  auto f = seen.get_future();
  pool.enqueue([&seen] { seen.set_value(thread_nice()); });
  return f.get();
}

TEST(HttpPool, WorkersRunBelowTheEnginesPriority) {
  const int own = thread_nice();
  if (own > 19 - 5) GTEST_SKIP() << "this process already runs at nice " << own;
  WorkerPool lowered(2, 8, 5);
  EXPECT_EQ(nice_of_a_job(lowered), own + 5);
  lowered.shutdown();
  WorkerPool same(2, 8, 0);
  EXPECT_EQ(nice_of_a_job(same), own);
  same.shutdown();
  EXPECT_EQ(thread_nice(), own) << "the caller's own priority is untouched";
}

TEST(HttpPool, NiceStopsAtTheLowestPriority) {
  const int own = thread_nice();
  WorkerPool pool(1, 4, 19);
  EXPECT_EQ(nice_of_a_job(pool), 19);
  pool.shutdown();
  EXPECT_EQ(thread_nice(), own);
}

// An urgent request's worker runs at the engine's priority while it serves
// it, and the next job on that thread is lowered again.
TEST(HttpPool, AnUrgentRequestRunsAtTheEnginesPriority) {
  const int own = thread_nice();
  if (own > 19 - 5) GTEST_SKIP() << "this process already runs at nice " << own;
  WorkerPool pool(1, 4, 5);  // one worker: every job runs on the same thread
  std::promise<std::pair<int, int>> seen;
  auto f = seen.get_future();
  bool raised = false;
  pool.enqueue([&] {
    raised = set_thread_urgent(true);
    const int urgent = thread_nice();
    set_thread_urgent(false);
    seen.set_value({urgent, thread_nice()});
  });
  const auto [urgent, after] = f.get();
  if (!raised) GTEST_SKIP() << "this process may not raise a thread's priority (not root, no CAP_SYS_NICE)";
  EXPECT_EQ(urgent, own);
  EXPECT_EQ(after, own + 5);
  pool.enqueue([] { set_thread_urgent(true); });  // left raised by a job...
  EXPECT_EQ(nice_of_a_job(pool), own + 5) << "...and lowered before the next one";
  pool.shutdown();
  EXPECT_TRUE(set_thread_urgent(true)) << "a thread outside a pool is left alone";
  EXPECT_EQ(thread_nice(), own);
}

}  // namespace
}  // namespace edgelm::serve
