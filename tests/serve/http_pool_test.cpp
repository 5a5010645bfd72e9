// The HTTP worker pool: its threads run below the engine's CPU priority.
#include "serve/http_pool.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>

#include "server_fixture.h"

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
  EXPECT_EQ(nice_of_a_job(pool), own + 5) << "...and lowered when it ends";
  pool.shutdown();
  EXPECT_TRUE(set_thread_urgent(true)) << "a thread outside a pool is left alone";
  EXPECT_EQ(thread_nice(), own);
}

// Threads of this process whose nice is `nice` (/proc/self/task/*/stat,
// field 19).
int threads_at_nice(int nice) {
  int n = 0;
  for (const auto& t : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream f(t.path() / "stat");
    std::string line;
    std::getline(f, line);
    const size_t close = line.rfind(')');  // the command name may hold spaces
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    for (int i = 3; i <= 19 && rest >> field; ++i) {
      if (i == 19 && std::stoi(field) == nice) ++n;
    }
  }
  return n;
}

// Once admitted, a request of the default class is served at the engine's
// priority too (its worker writes the tokens the engine makes); before, the
// worker runs at --http-nice.
TEST(HttpPool, AnAdmittedRequestIsStreamedAtTheEnginesPriority) {
  const int own = thread_nice();
  if (own > 19 - 10) GTEST_SKIP() << "this process already runs at nice " << own;
  test::LiveServer::Options o;
  o.slots = 1;
  o.step_ms = 20;  // 60 tokens: over a second of streaming
  test::LiveServer s(o);
  {
    WorkerPool probe(1, 1, 10);
    std::promise<bool> raised;
    auto f = raised.get_future();
    probe.enqueue([&raised] { raised.set_value(set_thread_urgent(true)); });
    if (!f.get()) GTEST_SKIP() << "this process may not raise a thread's priority (not root, no CAP_SYS_NICE)";
  }
  // A first request, so every worker thread has started and lowered itself.
  auto first = s.client().Post("/v1/chat/completions", test::chat_body("hi", 2, false), "application/json");
  ASSERT_TRUE(first);
  ASSERT_TRUE(s.wait_idle());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // its connection closed: its worker is lowered
  const int idle = threads_at_nice(own + 10);
  ASSERT_GT(idle, 1) << "the server's HTTP workers run at --http-nice 10";
  auto reply = std::async(std::launch::async, [&] {
    return s.client().Post("/v1/chat/completions", test::chat_body("hello there", 60, true), "application/json");
  });
  ASSERT_TRUE(test::wait_until([&] { return s.engine->stats().generated_tokens > 2; }, 10));
  EXPECT_EQ(threads_at_nice(own + 10), idle - 1) << "the streaming worker still runs at --http-nice";
  auto r = reply.get();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

}  // namespace
}  // namespace edgelm::serve
