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

}  // namespace
}  // namespace edgelm::serve
