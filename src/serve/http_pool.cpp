#include "serve/http_pool.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
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
thread_local bool t_close_after = false;
// Seconds a request may take beyond the first one while connections wait
// for a worker: none until its headers are read, then its body's at 64 KiB/s.
thread_local double t_body_seconds = 0;
thread_local const WorkerPool* t_pool = nullptr;
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

void close_after_response() {
  t_close_after = true;
}

void request_headers_read(uint64_t body_bytes) {
  t_body_seconds = 1.0 + static_cast<double>(body_bytes) / 65536.0;
}

bool set_thread_urgent(bool urgent) {
  if (t_pool_nice == INT_MIN || t_pool_nice == t_base_nice) return true;  // not a lowered pool thread
  return setpriority(PRIO_PROCESS, this_tid(), urgent ? t_base_nice : t_pool_nice) == 0;
}

WorkerPool::WorkerPool(int workers, int cap, int nice) : cap_(cap), nice_(nice) {
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { loop(jobs_, false); });
  for (int i = 0; i < kRefusers; ++i) threads_.emplace_back([this] { loop(refusals_, true); });
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

bool WorkerPool::backlog() {
  if (t_pool == nullptr) return false;
  std::lock_guard<std::mutex> lk(t_pool->mu_);
  return !t_pool->jobs_.empty();
}

void WorkerPool::loop(std::deque<std::function<void()>>& q, bool refusing) {
  t_over_capacity = refusing;
  t_pool = this;
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

// ---- HttpServer ----------------------------------------------------------

namespace {

using SteadyClock = std::chrono::steady_clock;

// Polls `fd` for `events` until `deadline`, in slices of at most 50 ms so
// that `give_up` (the server stopped, a backlog formed) is noticed, and asks
// it first. True when ready, or when the socket reports an error or hang-up
// (the read or write then says so).
template <class GiveUp>
bool wait_for(int fd, short events, SteadyClock::time_point deadline, GiveUp&& give_up) {
  for (;;) {
    if (give_up()) return false;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now())
            .count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 50)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

void endpoint_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  const int r = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                     : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  if (r != 0) return;
  char host[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof(host), nullptr, 0,
                  NI_NUMERICHOST) != 0)
    return;
  ip = host;
  port = a.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&a)->sin6_port)
                                 : ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port);
}

// One connection's byte stream, for all of its requests (bytes of a
// pipelined next request read with this one stay in the buffer). Reads fail
// after the current request's deadline or once the server stops; writes wait
// at most write_timeout for room each.
class ConnStream final : public httplib::Stream {
 public:
  ConnStream(int fd, std::chrono::milliseconds write_timeout, std::function<bool()> stopped)
      : fd_(fd), write_timeout_(write_timeout), stopped_(std::move(stopped)) {}

  void begin_request(SteadyClock::time_point deadline) {
    start_ = SteadyClock::now();
    deadline_ = deadline;
    in_body_ = after_cr_ = pending_lf_ = false;
    line_len_ = 0;
  }
  bool buffered() const { return pos_ < len_; }

  // Between requests: drops the CR and LF bytes buffered ahead of the next
  // request line (RFC 9112 2.2: a server ignores empty lines there; some
  // clients send CRLF after a body).
  void skip_empty_lines() {
    while (pos_ < len_ && (buf_[pos_] == '\r' || buf_[pos_] == '\n')) ++pos_;
  }
  // Between requests, once poll has said the socket is readable: takes what
  // it holds into the empty buffer. False at the end of the stream or on an
  // error.
  bool take_available() {
    ssize_t r;
    do {
      r = ::recv(fd_, buf_, sizeof(buf_), MSG_DONTWAIT);
    } while (r < 0 && errno == EINTR);
    if (r < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
    if (r == 0) return false;
    pos_ = 0;
    len_ = static_cast<size_t>(r);
    return true;
  }

  bool is_readable() const override {
    return buffered() || pending_lf_ || wait_for(fd_, POLLIN, deadline_, give_up_);
  }
  bool is_writable() const override {
    pollfd p{fd_, POLLOUT, 0};
    for (;;) {
      const int r = ::poll(&p, 1, static_cast<int>(write_timeout_.count()));
      if (r < 0 && errno == EINTR) continue;
      return r > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) == 0;
    }
  }
  ssize_t read(char* ptr, size_t size) override {
    if (size == 0) return 0;
    if (!in_body_) return read_head(ptr);
    if (!buffered()) {
      if (const ssize_t r = fill(); r <= 0) return r;
    }
    const size_t n = std::min(size, len_ - pos_);
    std::memcpy(ptr, buf_ + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t r;
    do {
      r = ::send(fd_, ptr, size, MSG_NOSIGNAL);
    } while (r < 0 && errno == EINTR);
    return r;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    endpoint_of(fd_, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    endpoint_of(fd_, false, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  // Waits for bytes until the request's deadline and reads them into the
  // empty buffer: the count, 0 at the end of the stream, -1 otherwise.
  ssize_t fill() {
    if (!wait_for(fd_, POLLIN, deadline_, give_up_)) return -1;
    ssize_t r;
    do {
      r = ::recv(fd_, buf_, sizeof(buf_), 0);
    } while (r < 0 && errno == EINTR);
    if (r <= 0) return r;
    pos_ = 0;
    len_ = static_cast<size_t>(r);
    return r;
  }
  // The request line and headers, one byte a call (httplib reads them so):
  // a line ended by a bare LF is handed on ended by CRLF (RFC 9112 2.2
  // allows a server to take LF alone; httplib looks for CRLF). The empty
  // line that ends the headers switches to the body, passed on unchanged.
  ssize_t read_head(char* ptr) {
    if (pending_lf_) {
      pending_lf_ = false;
      *ptr = '\n';
      end_line();
      return 1;
    }
    if (!buffered()) {
      if (const ssize_t r = fill(); r <= 0) return r;
    }
    const char c = buf_[pos_++];
    if (c == '\n' && !after_cr_) {
      pending_lf_ = true;
      *ptr = '\r';
      return 1;
    }
    if (c == '\n') {
      end_line();
    } else {
      after_cr_ = c == '\r';
      if (c != '\r') ++line_len_;
    }
    *ptr = c;
    return 1;
  }
  void end_line() {
    if (line_len_ == 0) in_body_ = true;
    line_len_ = 0;
    after_cr_ = false;
  }

  const int fd_;
  const std::chrono::milliseconds write_timeout_;
  const std::function<bool()> stopped_;
  // Stop waiting for the request: the server stopped, or, while
  // connections wait for a worker, it is still coming a second after its
  // first byte (its headers), or its body slower than 64 KiB/s.
  const std::function<bool()> give_up_ = [this] {
    return stopped_() ||
           (SteadyClock::now() - start_ > std::chrono::duration<double>(1.0 + t_body_seconds) &&
            WorkerPool::backlog());
  };
  SteadyClock::time_point start_{}, deadline_{};
  char buf_[4096];
  size_t pos_ = 0, len_ = 0;
  // Where the current request is: in its line and headers (which line,
  // how long so far, after a CR, owing the LF of a bare LF) or its body.
  bool in_body_ = false, after_cr_ = false, pending_lf_ = false;
  size_t line_len_ = 0;
};

// Waits for the first byte of a connection's next request: true when it has
// come. Gives up after `idle`, once the server stops, or, while connections
// wait for a worker, after `idle_under_backlog`.
// Empty lines ahead of the request are dropped as they come.
template <class GiveUp>
bool wait_for_request(int fd, ConnStream& s, std::chrono::milliseconds idle,
                      std::chrono::milliseconds idle_under_backlog, GiveUp&& stopped) {
  const auto start = SteadyClock::now();
  for (;;) {
    s.skip_empty_lines();
    if (s.buffered()) return true;
    if (!wait_for(fd, POLLIN, start + idle, [&] {
          return stopped() ||
                 (SteadyClock::now() - start >= idle_under_backlog && WorkerPool::backlog());
        }))
      return false;
    if (!s.take_available()) return false;
  }
}

// Closes a connection. If the client is still sending (a body that was
// refused unread), reads and drops it for up to 250 ms (at most 16 MiB)
// first: closing a socket with unread bytes resets the connection, and the
// client may lose the reply it has not read yet. `expect_more`: the client
// is yet to send (a reply went out before its request), so wait for it.
void close_connection(int fd, bool expect_more = false) {
  ::shutdown(fd, SHUT_WR);
  char c;
  if (expect_more || ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0) {
    const auto end = SteadyClock::now() + std::chrono::milliseconds(250);
    size_t dropped = 0;
    char sink[4096];
    while (dropped < (16u << 20) && wait_for(fd, POLLIN, end, [] { return false; })) {
      const ssize_t r = ::recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
      if (r <= 0 && !(r < 0 && (errno == EAGAIN || errno == EINTR))) break;
      if (r > 0) dropped += static_cast<size_t>(r);
    }
  }
  ::close(fd);
}

}  // namespace

bool HttpServer::process_and_close_socket(socket_t sock) {
  using std::chrono::milliseconds;
  const bool refusing = over_capacity_thread();
  const auto stopped = [this] { return this->stopped(); };
  ConnStream strm(sock, lim_.write_timeout, stopped);
  // Over the cap: a moment to start the request and a second to send its
  // headers (the reply needs no body); no second request.
  const milliseconds idle = refusing ? milliseconds(100) : lim_.keep_alive;
  const milliseconds read_timeout =
      refusing ? std::min(lim_.read_timeout, milliseconds(1000)) : lim_.read_timeout;
  bool ret = true;
  if (refusing && !wait_for_request(sock, strm, idle, idle, stopped)) {
    // Silent over the cap: the refusal all the same, before the request.
    const std::string reply = silent_refusal_ && !stopped() ? silent_refusal_() : std::string();
    for (size_t sent = 0; sent < reply.size();) {
      const ssize_t w = strm.write(reply.data() + sent, reply.size() - sent);
      if (w <= 0) break;
      sent += static_cast<size_t>(w);
    }
    close_connection(sock, !reply.empty());
    return false;
  }
  for (int n = 0; n < lim_.keep_alive_requests; ++n) {
    // A new connection that has sent nothing gives way after 200 ms; one
    // that has been answered (keep-alive), after a second, since its client
    // may be about to reuse it (replies written under a backlog already
    // closed theirs, saying so).
    if (!wait_for_request(sock, strm, idle, milliseconds(n == 0 ? 200 : 1000), stopped)) break;
    strm.begin_request(SteadyClock::now() + read_timeout);
    t_close_after = false;
    t_body_seconds = 0;
    bool closed = false;
    ret = process_request(strm, refusing || n + 1 == lim_.keep_alive_requests, closed, nullptr);
    if (!ret || closed || t_close_after || refusing) break;
  }
  t_close_after = false;
  close_connection(sock);
  return ret;
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
