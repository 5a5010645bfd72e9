// The HTTP side's threads and connections: a bounded worker pool for
// cpp-httplib, and a way for a handler to notice that its client hung up.
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace edgelm::serve {

// True on the thread that answers connections over the cap, so the
// pre-routing handler refuses them at once.
bool over_capacity_thread();

// On a WorkerPool thread: runs the thread at the process's own priority (the
// engine's) while it serves an urgent request, else at the pool's lower one.
// An urgent request's parsing, wait for a slot, hand-off to the engine and
// stream must not queue behind the engine's busy cores (measured: a sensor's
// prompt reached the engine up to 0.3 s after its admission). Raising a
// thread's priority needs root, CAP_SYS_NICE or a RLIMIT_NICE (systemd
// LimitNICE=) that allows it: false when refused. A no-op elsewhere.
bool set_thread_urgent(bool urgent);

// httplib's task queue, bounded: `workers` threads serve connections; up to
// `cap` connections may be open; the rest go to one refusing thread that
// answers 503 as soon as it has read the request line and headers. The
// threads run `nice` steps below the process's priority (Linux nice is per
// thread): parsing, tokenizing and refusing a flood of requests must not take
// the cores the engine's steps need, or the admitted streams pay for the
// refused ones (8 clients retrying at once without waiting sent 2,200
// requests a second and held an admitted request's first token for 81 s).
class WorkerPool : public httplib::TaskQueue {
 public:
  WorkerPool(int workers, int cap, int nice = 0);
  ~WorkerPool() override;
  void enqueue(std::function<void()> fn) override;
  void shutdown() override;
  int open() const;

 private:
  void loop(std::deque<std::function<void()>>& q, bool refusing);

  const int cap_;
  const int nice_;
  mutable std::mutex mu_;
  // One per queue, so that a connection wakes one worker of its own kind
  // (notify_all woke every idle worker, dozens of them, for each).
  std::condition_variable jobs_cv_, refusals_cv_;
  std::deque<std::function<void()>> jobs_, refusals_;
  std::vector<std::thread> threads_;
  int open_ = 0;
  bool stop_ = false;
};

// Has the client of `req` hung up? cpp-httplib 0.11 gives a handler no
// handle on its socket, so this finds it: the one descriptor of this
// process whose local and peer addresses are the request's (a TCP
// connection is unique by those four). The socket stays open while its
// handler runs (httplib closes it after), so the descriptor found is the
// connection's for as long as the handler asks. Then a poll for hang-up, or
// a peek that reads end-of-file, says the client is gone; bytes of a
// pipelined next request do not.
class ClientWatch {
 public:
  explicit ClientWatch(const httplib::Request& req) : req_(req) {}
  bool gone();

 private:
  const httplib::Request& req_;
  int fd_ = -2;  // -2: not looked up yet; -1: not found (then never gone)
};

}  // namespace edgelm::serve
