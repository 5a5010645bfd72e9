#include "serve/http_pool.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/sched.h"

namespace edgelm::serve {

namespace {
thread_local bool t_over_capacity = false;
// A pool thread's nice values: as it started (the process's, the engine's)
// and as the pool runs it. Unset (INT_MIN) on threads outside a pool.
thread_local int t_base_nice = INT_MIN;
thread_local int t_pool_nice = INT_MIN;

id_t this_tid() { return static_cast<id_t>(syscall(SYS_gettid)); }

// Lowers the calling thread's CPU priority by `delta` nice steps (at most to
// 19) and remembers both levels.
void lower_thread_priority(int delta) {
  errno = 0;
  const int cur = getpriority(PRIO_PROCESS, this_tid());
  if (errno != 0) return;
  t_base_nice = t_pool_nice = cur;
  if (delta <= 0) return;
  if (setpriority(PRIO_PROCESS, this_tid(), std::min(cur + delta, 19)) == 0) t_pool_nice = std::min(cur + delta, 19);
}
}  // namespace

bool over_capacity_thread() { return t_over_capacity; }

bool set_thread_urgent(bool urgent) {
  if (t_pool_nice == INT_MIN || t_pool_nice == t_base_nice) return true;  // not a lowered pool thread
  return setpriority(PRIO_PROCESS, this_tid(), urgent ? t_base_nice : t_pool_nice) == 0;
}

WorkerPool::WorkerPool(int workers, int cap, int nice) : cap_(cap), nice_(nice) {
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { loop(jobs_, false); });
  threads_.emplace_back([this] { loop(refusals_, true); });
}

WorkerPool::~WorkerPool() { shutdown(); }

void WorkerPool::enqueue(std::function<void()> fn) {
  bool refusing = true;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (open_ < cap_) {
      ++open_;
      jobs_.push_back(std::move(fn));
      refusing = false;
    } else {
      refusals_.push_back(std::move(fn));
    }
  }
  (refusing ? refusals_cv_ : jobs_cv_).notify_one();
}

void WorkerPool::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) return;
    stop_ = true;
  }
  jobs_cv_.notify_all();
  refusals_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

int WorkerPool::open() const {
  std::lock_guard<std::mutex> lk(mu_);
  return open_;
}

void WorkerPool::loop(std::deque<std::function<void()>>& q, bool refusing) {
  t_over_capacity = refusing;
  lower_thread_priority(nice_);
  // Each job is small and a client waits on it: wake ahead of the engine's
  // threads rather than after their slice.
  request_short_slice();
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> lk(mu_);
      (refusing ? refusals_cv_ : jobs_cv_).wait(lk, [&] { return stop_ || !q.empty(); });
      if (q.empty()) return;  // stopping and drained
      fn = std::move(q.front());
      q.pop_front();
    }
    fn();  // serves the connection until it closes
    set_thread_urgent(false);  // whatever its requests were: an idle worker waits lowered
    if (!refusing) {
      std::lock_guard<std::mutex> lk(mu_);
      --open_;
    }
  }
}

namespace {

// "127.0.0.1":8080 as the socket address family would hold it.
bool same_endpoint(const sockaddr_storage& a, const std::string& ip, int port) {
  char buf[INET6_ADDRSTRLEN] = {};
  int p = -1;
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof(buf));
    p = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof(buf));
    p = ntohs(v6->sin6_port);
  } else {
    return false;
  }
  // httplib writes an IPv6 scope (fe80::1%eth0); inet_ntop does not.
  return p == port && ip.substr(0, ip.find('%')) == buf;
}

int find_connection(const httplib::Request& req) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  while (dirent* ent = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(ent->d_name, &end, 10);
    if (end == ent->d_name || *end != '\0') continue;
    sockaddr_storage peer{}, local{};
    socklen_t pl = sizeof(peer), ll = sizeof(local);
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (!same_endpoint(peer, req.remote_addr, req.remote_port)) continue;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
    if (!same_endpoint(local, req.local_addr, req.local_port)) continue;
    found = static_cast<int>(fd);
    break;
  }
  closedir(d);
  return found;
}

}  // namespace

bool ClientWatch::gone() {
  if (fd_ == -2) fd_ = find_connection(req_);
  if (fd_ < 0) return false;
  // Not POLLRDHUP: a client that half-closes after sending its request
  // still waits for the answer.
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char c;
    return ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
  return false;
}

}  // namespace edgelm::serve
