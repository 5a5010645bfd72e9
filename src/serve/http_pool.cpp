#include "serve/http_pool.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>

#include "core/sched.h"

namespace edgelm::serve {

namespace {
thread_local bool t_over_capacity = false;
thread_local bool t_close_after = false;
// The request being served is the last its connection may carry (httplib's
// close_connection): httplib marks its reply "Connection: close" itself.
thread_local bool t_last_request = false;
// Seconds a request may take beyond the first one while connections wait
// for a worker: none until its headers are read, then its body's at 64 KiB/s.
thread_local double t_body_seconds = 0;
thread_local WorkerPool* t_pool = nullptr;
// Set by WorkerPool::park: the job's connection stays open, parked.
thread_local bool t_parked = false;
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

void mark_close(const httplib::Request& req, httplib::Response& res) {
  // httplib 0.11 writes "Connection: close" for a request that asked for
  // the close (to the letter) or was the connection's last, appending it
  // beside any of the handlers'.
  if (t_last_request || req.get_header_value("Connection") == "close") return;
  if (!res.has_header("Connection")) res.set_header("Connection", "close");
}

void request_headers_read(uint64_t body_bytes) {
  t_body_seconds = 1.0 + static_cast<double>(body_bytes) / 65536.0;
}

bool set_thread_urgent(bool urgent) {
  if (t_pool_nice == INT_MIN || t_pool_nice == t_base_nice) return true;  // not a lowered pool thread
  return setpriority(PRIO_PROCESS, this_tid(), urgent ? t_base_nice : t_pool_nice) == 0;
}

WorkerPool::WorkerPool(int workers, int cap, int nice) : cap_(cap), nice_(nice) {
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  lobby_up_.store(wake_fd_ >= 0);
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { loop(jobs_, false); });
  for (int i = 0; i < kRefusers; ++i) threads_.emplace_back([this] { loop(refusals_, true); });
  if (wake_fd_ >= 0) threads_.emplace_back([this] { lobby(); });
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
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
  for (auto& t : threads_) t.join();
  if (wake_fd_ >= 0) ::close(wake_fd_);
  wake_fd_ = -1;
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

bool WorkerPool::at_cap() const {
  std::lock_guard<std::mutex> lk(mu_);
  return open_ >= cap_;
}

bool WorkerPool::crowded() {
  return t_pool != nullptr && t_pool->at_cap();
}

bool WorkerPool::can_park() {
  return t_pool != nullptr && !t_over_capacity && t_pool->lobby_up_.load();
}

void WorkerPool::park(std::unique_ptr<Parked> p) {
  WorkerPool* pool = t_pool;
  {
    std::lock_guard<std::mutex> lk(pool->mu_);
    if (pool->stop_) return;  // p closes; the worker's loop counts it closed
    pool->parking_.push_back(std::move(p));
  }
  t_parked = true;
  const uint64_t one = 1;
  (void)!::write(pool->wake_fd_, &one, sizeof(one));
}

bool WorkerPool::can_park_refused() {
  return t_pool != nullptr && t_over_capacity && t_pool->lobby_up_.load();
}

void WorkerPool::park_refused(std::unique_ptr<Parked> p) {
  WorkerPool* pool = t_pool;
  p->over_cap = true;
  {
    std::lock_guard<std::mutex> lk(pool->mu_);
    if (pool->stop_) return;  // p closes
    if (pool->undecided_ < pool->cap_) {
      ++pool->undecided_;
      p->undecided = true;
      pool->parking_.push_back(std::move(p));
    }
  }
  if (p) {
    // As many wait already as the cap allows to be open: no room to read
    // this one's request; its 503 now, and the lingering close.
    p->refuse_now();
    std::lock_guard<std::mutex> lk(pool->mu_);
    if (pool->stop_) return;
    pool->parking_.push_back(std::move(p));
  }
  const uint64_t one = 1;
  (void)!::write(pool->wake_fd_, &one, sizeof(one));
}

bool WorkerPool::resume(std::unique_ptr<Parked>& p) {
  // std::function must be copyable: the connection travels in a shared box,
  // and closes with it should the job be dropped unrun.
  auto box = std::make_shared<std::unique_ptr<Parked>>(std::move(p));
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) {
      p = std::move(*box);
      return false;
    }
    jobs_.push_back([box] {
      std::unique_ptr<Parked> c = std::move(*box);
      Parked* raw = c.get();
      raw->serve(std::move(c));
    });
  }
  jobs_cv_.notify_one();
  return true;
}

// The lobby: one thread polls every parked connection (epoll), asks each
// what its bytes and its clock say, and hands it to a worker, or closes it.
void WorkerPool::lobby() {
  lower_thread_priority(nice_);
  request_short_slice();
  using Next = Parked::Next;
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  std::unordered_map<int, std::unique_ptr<Parked>> parked;
  const auto closed = [this](int n) {
    std::lock_guard<std::mutex> lk(mu_);
    open_ -= n;
  };
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.fd = wake_fd_;
  if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, wake_fd_, &wake) != 0) {
    // No poller: workers wait on their connections themselves from now on
    // (can_park); those parked before this are closed.
    lobby_up_.store(false);
    for (;;) {
      std::vector<std::unique_ptr<Parked>> in;
      {
        std::unique_lock<std::mutex> lk(mu_);
        in.swap(parking_);
        if (stop_ && in.empty()) break;
      }
      int n = 0, undecided = 0;
      for (const auto& p : in) n += p->over_cap ? 0 : 1, undecided += p->undecided ? 1 : 0;
      closed(n);
      {
        std::lock_guard<std::mutex> lk(mu_);
        undecided_ -= undecided;
      }
      in.clear();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (ep >= 0) ::close(ep);
    return;
  }
  // An over-cap connection leaves the waiting ones when it is admitted,
  // refused or closed.
  const auto decided = [this](Parked& p) {
    if (!p.undecided) return;
    p.undecided = false;
    std::lock_guard<std::mutex> lk(mu_);
    --undecided_;
  };
  const auto settle = [&](int fd, Next next) {
    if (next == Next::kWait) return;
    auto it = parked.find(fd);
    if (it == parked.end()) return;
    decided(*it->second);
    if (it->second->over_cap && next == Next::kServe) {
      // Over the cap when accepted: admitted if there is room now, else
      // refused (and kept until its reply has been read).
      bool room = false;
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (open_ < cap_ && !stop_) ++open_, room = true;
      }
      if (!room) {
        it->second->refuse_now();
        return;
      }
      it->second->over_cap = false;
      it->second->admitted();
    }
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
    std::unique_ptr<Parked> p = std::move(it->second);
    parked.erase(it);
    if (next == Next::kServe && resume(p)) return;
    const bool counted = !p->over_cap;
    p.reset();
    if (counted) closed(1);
  };
  epoll_event evs[64];
  std::vector<std::pair<int, Next>> due;
  for (;;) {
    std::vector<std::unique_ptr<Parked>> in;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stop_) break;
      in.swap(parking_);
    }
    for (auto& p : in) {
      const int fd = p->fd();
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        decided(*p);
        const bool counted = !p->over_cap;
        p.reset();
        if (counted) closed(1);
        continue;
      }
      parked.emplace(fd, std::move(p));
    }
    const int n = epoll_wait(ep, evs, 64, 50);
    for (int i = 0; i < n; ++i) {
      const int fd = evs[i].data.fd;
      if (fd == wake_fd_) {
        uint64_t v;
        (void)!::read(wake_fd_, &v, sizeof(v));
        continue;
      }
      auto it = parked.find(fd);
      if (it != parked.end()) settle(fd, it->second->readable());
    }
    const auto now = std::chrono::steady_clock::now();
    const bool full = at_cap();
    due.clear();
    for (auto& [fd, p] : parked) {
      const Next next = p->check(now, full);
      if (next != Next::kWait) due.emplace_back(fd, next);
    }
    for (const auto& [fd, next] : due) settle(fd, next);
  }
  // Stopping: every parked connection closes.
  int n = 0;
  for (const auto& [fd, p] : parked) n += p->over_cap ? 0 : 1;
  parked.clear();
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& p : parking_) n += p->over_cap ? 0 : 1;
    parking_.clear();
  }
  closed(n);
  ::close(ep);
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
    t_parked = false;
    fn();                      // serves the connection until it closes, or parks it
    set_thread_urgent(false);  // whatever its requests were: an idle worker waits lowered
    if (!refusing && !t_parked) {
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

}  // namespace

// One connection: its socket and the bytes read from it that httplib has
// not taken yet (a pipelined next request's stay for it). It moves between
// the workers, which serve its requests, and the pool's lobby, where it
// waits for the next one.
class HttpConn final : public WorkerPool::Parked {
 public:
  HttpConn(HttpServer& server, int sock) : server_(server), sock(sock) {}
  ~HttpConn() override {
    if (sock >= 0) ::close(sock);
  }

  // What the lobby keeps of a request before handing it to a worker: its
  // line and headers, and its body when the whole request fits (larger
  // bodies are read by the worker). Connections x this bounds the lobby's
  // memory (server_buffer_bytes).
  static constexpr size_t kLobbyBytes = 64 * 1024;
  static constexpr size_t kOverCapBytes = 8 * 1024;

  int fd() const override { return sock; }
  Next readable() override {
    if (draining) return drain() ? Next::kWait : Next::kDrop;
    const bool open = take_available();
    if (over_cap) {
      if (started && (scan().head_done || in.size() - pos >= kOverCapBytes)) return Next::kServe;
      return open ? Next::kWait : Next::kDrop;
    }
    answer_expect();
    if (request_ready()) return Next::kServe;
    if (!open) return Next::kDrop;  // the client left with no whole request
    return Next::kWait;
  }
  Next check(SteadyClock::time_point now, bool full) override {
    using std::chrono::milliseconds;
    if (draining) return now >= drain_until ? Next::kDrop : Next::kWait;
    if (over_cap) {
      // A moment to start its request, a second to send its line and
      // headers (a refusal needs no body), then the decision.
      if (!started) return now - parked_at >= milliseconds(100) ? Next::kServe : Next::kWait;
      return now - first_byte >= milliseconds(1000) || scan().head_done ? Next::kServe
                                                                        : Next::kWait;
    }
    // A request begun but not whole in time goes to a worker, which answers
    // it 400; an idle connection closes.
    if (now >= deadline()) return started ? Next::kServe : Next::kDrop;
    if (!full) return Next::kWait;
    // While the cap is full: a new connection silent for 200 ms, or an
    // answered one idle for a second (its client may be about to reuse it:
    // replies written while the cap is full say Connection: close), gives
    // way; a request gets a second for its line and headers.
    if (!started)
      return now - parked_at >= milliseconds(served == 0 ? 200 : 1000) ? Next::kDrop : Next::kWait;
    if (now - first_byte >= milliseconds(1000) && !scan().head_done) {
      cut = true;
      return Next::kServe;
    }
    return Next::kWait;
  }
  void serve(std::unique_ptr<Parked> self) override {
    server_.serve(std::unique_ptr<HttpConn>(static_cast<HttpConn*>(self.release())));
  }
  void admitted() override { parked_at = SteadyClock::now(); }
  // The 503 (it fits a socket's buffer: sent without waiting), then the
  // lingering close.
  void refuse_now() override {
    const std::string reply =
        server_.canned_ ? server_.canned_(HttpServer::Canned::kTooManyConnections) : "";
    if (!reply.empty())
      (void)!::send(sock, reply.data(), reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    start_draining();
  }
  // A lingering close: the sending side is shut, and what the client still
  // sends (a body refused unread, a request that will not be answered) is
  // read and dropped until it closes, or 250 ms pass without a byte, or 2 s
  // or 16 MiB in all; closing a socket with unread bytes would reset the
  // connection, and the client could lose the reply it has not read yet.
  void start_draining() {
    ::shutdown(sock, SHUT_WR);
    draining = true;
    drain_start = SteadyClock::now();
    drain_until = drain_start + std::chrono::milliseconds(250);
    drained = 0;
    std::string().swap(in);  // its memory too
    pos = 0;
  }
  // The lingering close where there is no lobby to do it: the same rule,
  // waited out on this thread; the socket closes with the connection.
  void linger_here() {
    start_draining();
    while (wait_for(sock, POLLIN, drain_until, [this] { return server_.stopped(); }) && drain()) {
    }
  }
  // Reads and drops what has come: false when the draining is over (the
  // end of the stream, an error, or 16 MiB).
  bool drain() {
    char sink[4096];
    for (;;) {
      const ssize_t r = ::recv(sock, sink, sizeof(sink), MSG_DONTWAIT);
      if (r > 0) {
        drained += static_cast<size_t>(r);
        if (drained > (16u << 20)) return false;
        drain_until = std::min(drain_start + std::chrono::milliseconds(2000),
                               SteadyClock::now() + std::chrono::milliseconds(250));
        continue;
      }
      return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
    }
  }

  bool buffered() const { return pos < in.size(); }
  // When the current request must be whole: read_timeout after its first
  // byte; between requests, keep_alive after the last reply.
  SteadyClock::time_point deadline() const {
    return started ? first_byte + server_.lim_.read_timeout : parked_at + server_.lim_.keep_alive;
  }

  // Reads what the socket holds now, without waiting (up to kLobbyBytes
  // buffered). False at the end of the stream or on an error.
  bool take_available() {
    while (!eof && in.size() - pos < bound()) {
      const ssize_t r = recv_some(MSG_DONTWAIT);
      if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) eof = true;
      if (r < 4096) break;
    }
    note_bytes();
    return !eof;
  }
  // One recv of up to 4096 bytes onto the end of the buffer (compacted
  // first): the count, 0 at the end of the stream (eof set), or -1 with
  // errno as recv left it.
  ssize_t recv_some(int flags) {
    compact();
    const size_t old = in.size();
    grow(old + 4096);
    ssize_t r;
    do {
      r = ::recv(sock, in.data() + old, 4096, flags);
    } while (r < 0 && errno == EINTR);
    const int err = errno;
    in.resize(old + static_cast<size_t>(std::max<ssize_t>(r, 0)));
    if (r == 0) eof = true;
    errno = err;
    return r;
  }
  // What the buffer may hold of a request: a connection over the cap needs
  // only its line and headers, and not all of those, to be refused.
  size_t bound() const { return over_cap ? kOverCapBytes : kLobbyBytes; }
  // Resizes the buffer to n bytes, its capacity kept within the bound plus
  // one read (std::string would double it).
  void grow(size_t n) {
    if (n > in.capacity()) in.reserve(std::min(std::max(n, 2 * in.capacity()), bound() + 4096));
    in.resize(n);
  }
  // After bytes were added: empty lines before a request line are dropped
  // (RFC 9112 2.2: a server ignores them; some clients send CRLF after a
  // body), and the first byte of a request starts its clock.
  void note_bytes() {
    if (started) return;
    while (pos < in.size() && (in[pos] == '\r' || in[pos] == '\n')) ++pos;
    if (buffered()) {
      started = true;
      first_byte = SteadyClock::now();
    }
  }
  // A request ended: the next one starts with the bytes already here.
  void request_done() {
    started = continued = cut = false;
    reset_scan();
    ++served;
    note_bytes();
  }
  void compact() {
    if (pos == in.size()) {
      in.clear();
      pos = 0;
    } else if (pos >= 4096) {
      in.erase(0, pos);
      pos = 0;
    }
  }

  // A request line of the form "METHOD target HTTP/1.x" whose method, a
  // token, is none that httplib routes (it answers the others 400, as if
  // the line were malformed; CONNECT and TRACE too): RFC 9110 asks for 501,
  // a method the server does not implement. Methods are case-sensitive:
  // "get" is one of these.
  static bool unknown_method(std::string_view l, std::string_view method) {
    const size_t last = l.rfind(' ');
    if (method.empty() || method.size() == l.size() || last == method.size()) return false;
    const std::string_view version = l.substr(last + 1);
    if (version != "HTTP/1.1" && version != "HTTP/1.0") return false;
    for (const char ch : method) {
      const auto u = static_cast<unsigned char>(ch);
      if (!(std::isalnum(u) ||
            std::string_view("!#$%&'*+-.^_`|~").find(ch) != std::string_view::npos))
        return false;
    }
    for (const std::string_view k : kRoutedMethods)
      if (method == k) return false;
    return true;
  }

  // What the buffered bytes of the next request say. A bare LF ends a line
  // as CRLF does (ConnStream hands such lines on ended by CRLF, and a bare
  // CR as a space: one line either way).
  struct Scan {
    bool head_done = false;   // its line and headers are here
    bool bad_length = false;  // a Content-Length that is not digits as sent
    bool wait_body = true;    // its body comes without being asked for
    uint64_t length = 0;      // Content-Length (the last)
    size_t head_bytes = 0, have = 0;
    size_t expect_at = std::string_view::npos;  // where "100-continue" is
    bool posts = false;                         // a method that sends a body
    bool http10 = false;                        // an HTTP/1.0 request
    bool seen_length = false;
    bool unknown_method = false;  // a well-formed request line, a method httplib does not route
  };
  // Incremental: lines already read are not read again (a head trickled in
  // small pieces would otherwise be rescanned whole at every piece, on the
  // one lobby thread); reset when a request is done.
  Scan scan() const {
    Scan& r = sc_;
    const std::string_view b(in.data() + pos, in.size() - pos);
    r.have = b.size();
    for (size_t nl; !r.head_done && (nl = b.find('\n', sc_next_)) != std::string_view::npos;) {
      const size_t line = sc_next_;
      sc_next_ = nl + 1;
      std::string_view l = b.substr(line, nl - line);
      if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
      if (l.empty()) {
        r.head_done = true;
        r.head_bytes = nl + 1;
        break;
      }
      if (line == 0) {  // the request line
        const std::string_view method = l.substr(0, l.find(' '));
        r.posts = method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE";
        r.http10 = l.size() >= 9 && l.substr(l.size() - 9) == " HTTP/1.0";
        r.unknown_method = unknown_method(l, method);
        if (r.unknown_method) r.wait_body = false;  // answered without it
        continue;
      }
      const size_t colon = l.find(':');
      if (colon == std::string_view::npos) continue;
      const std::string_view name = l.substr(0, colon);
      const std::string_view value = trim_blanks(l.substr(colon + 1));
      if (iequals(name, "content-length")) {
        // httplib decodes %XX in header values ("%31%36" would be 16): the
        // digits must be digits as sent. Longer than 19 is over any limit.
        if (value.empty() || value.find_first_not_of("0123456789") != std::string_view::npos) {
          r.bad_length = true;
        } else {
          const uint64_t length = value.size() > 19 ? UINT64_MAX : std::stoull(std::string(value));
          // Two different lengths are refused (server.cpp): do not wait.
          if (r.seen_length && length != r.length) r.wait_body = false;
          r.length = length;
          r.seen_length = true;
        }
      } else if (iequals(name, "transfer-encoding")) {
        r.wait_body = false;  // refused (server.cpp)
      } else if (iequals(name, "expect") && iequals(value, "100-continue")) {
        r.expect_at = static_cast<size_t>(value.data() - b.data());
      }
    }
    if (r.length > server_.lim_.max_body) r.wait_body = false;  // refused unread
    return r;
  }
  void reset_scan() {
    sc_ = Scan{};
    sc_next_ = 0;
  }
  // Whether a worker should take the connection: its next request's line
  // and headers are here, and its body (of a longer one, up to the lobby's
  // bound) unless it is not to be awaited; or its line and headers overflow
  // the lobby's bound (431).
  bool request_ready() const {
    if (!started) return false;
    const Scan r = scan();
    if (!r.head_done) return r.have >= kLobbyBytes;
    if (r.bad_length || !r.wait_body) return true;
    if (r.expect_at != std::string_view::npos && !continued) return true;  // httplib answers it
    return r.have - r.head_bytes >= r.length || r.have >= kLobbyBytes;
  }
  // A client that sends "Expect: 100-continue" waits for "100 Continue"
  // before its body. When nothing in the head is to be refused (the checks
  // of server.cpp's refuse_framing: a body method, one length, not over
  // --max-body), the invitation goes out from here and the body is awaited
  // here, like any other; the header's value is then rewritten to
  // "100-Continue", which httplib (comparing to the letter) does not answer
  // a second time. Otherwise httplib's Expect handler answers it, refusal
  // or invitation, on a worker; but not in HTTP/1.0, which knows no Expect.
  void answer_expect() {
    if (!started || continued) return;
    const Scan r = scan();
    if (r.head_done && r.expect_at != std::string_view::npos && r.http10) {
      // RFC 9110 10.1.1: an HTTP/1.0 request's Expect is ignored.
      in[pos + r.expect_at + 4] = 'C';
      continued = true;
      return;
    }
    if (!r.head_done || r.expect_at == std::string_view::npos || r.bad_length || !r.wait_body ||
        !r.posts || r.length == 0)
      return;
    static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    const bool body_here = r.have - r.head_bytes >= r.length;  // sent without waiting
    if (!body_here) {
      const ssize_t n = ::send(sock, kContinue, sizeof(kContinue) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n <= 0) return;  // no room (a client not reading): httplib invites it
      if (n < static_cast<ssize_t>(sizeof(kContinue) - 1)) {
        // Part of the line went out and the rest cannot follow without
        // waiting: the connection is beyond repair; end it.
        ::shutdown(sock, SHUT_RDWR);
        return;
      }
    }
    in[pos + r.expect_at + 4] = 'C';
    continued = true;
  }

  HttpServer& server_;
  int sock;
  std::string in;  // bytes read; in[pos..] not yet taken
  size_t pos = 0;
  bool eof = false;      // the client sent its last byte
  bool started = false;  // a request's first byte is here
  bool cut = false;      // its line and headers were too slow while the cap was full
  bool continued = false;  // "100 Continue" went out for it
  bool draining = false;   // refused over the cap: its bytes are dropped until drain_until
  int served = 0;
  SteadyClock::time_point first_byte{}, parked_at{}, drain_start{}, drain_until{};
  size_t drained = 0;
  mutable Scan sc_;             // what scan() has read of the next request
  mutable size_t sc_next_ = 0;  // where its next unread line starts (from pos)
};

namespace {

// A connection's byte stream for httplib, one request at a time, over the
// connection's buffer. Reads fail after the request's deadline or once the
// server stops; writes wait at most write_timeout for room each.
class ConnStream final : public httplib::Stream {
 public:
  ConnStream(HttpConn& c, std::chrono::milliseconds write_timeout, std::function<bool()> stopped)
      : c_(c), write_timeout_(write_timeout), stopped_(std::move(stopped)) {}

  void begin_request(SteadyClock::time_point deadline) {
    start_ = SteadyClock::now();
    deadline_ = deadline;
    in_body_ = after_cr_ = pending_lf_ = false;
    line_len_ = head_bytes_ = 0;
  }

  bool is_readable() const override {
    return c_.buffered() || pending_lf_ || wait_for(c_.sock, POLLIN, deadline_, give_up_);
  }
  bool is_writable() const override {
    pollfd p{c_.sock, POLLOUT, 0};
    for (;;) {
      const int r = ::poll(&p, 1, static_cast<int>(write_timeout_.count()));
      if (r < 0 && errno == EINTR) continue;
      return r > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) == 0;
    }
  }
  ssize_t read(char* ptr, size_t size) override {
    if (size == 0) return 0;
    if (!in_body_) return read_head(ptr);
    if (!c_.buffered()) {
      if (const ssize_t r = fill(); r <= 0) return r;
    }
    const size_t n = std::min(size, c_.in.size() - c_.pos);
    std::memcpy(ptr, c_.in.data() + c_.pos, n);
    c_.pos += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t r;
    do {
      r = ::send(c_.sock, ptr, size, MSG_NOSIGNAL);
    } while (r < 0 && errno == EINTR);
    return r;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    endpoint_of(c_.sock, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    endpoint_of(c_.sock, false, ip, port);
  }
  socket_t socket() const override { return c_.sock; }

 private:
  // Waits for bytes until the request's deadline and reads them into the
  // emptied buffer: the count, 0 at the end of the stream, -1 otherwise.
  ssize_t fill() {
    if (c_.eof) return 0;
    if (!wait_for(c_.sock, POLLIN, deadline_, give_up_)) return -1;
    return c_.recv_some(0);
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
    if (!c_.buffered()) {
      if (const ssize_t r = fill(); r <= 0) return r;
    }
    // httplib keeps a line whole however long it is: the line and headers
    // end within the lobby's bound or the read fails.
    if (++head_bytes_ > HttpConn::kLobbyBytes) return -1;
    char c = c_.in[c_.pos++];
    if (c == '\r') {
      // A CR not followed by LF is taken as a space (RFC 9112 2.2), as
      // HttpConn::scan reads it: one line either way.
      if (!c_.buffered()) {
        if (const ssize_t r = fill(); r <= 0) return r;
      }
      if (c_.in[c_.pos] != '\n') c = ' ';
    }
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

  HttpConn& c_;
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
  // Where the current request is: in its line and headers (how long the
  // line is so far, after a CR, owing the LF of a bare LF) or its body.
  bool in_body_ = false, after_cr_ = false, pending_lf_ = false;
  size_t line_len_ = 0, head_bytes_ = 0;
};

}  // namespace

bool HttpServer::process_and_close_socket(socket_t sock) {
  if (over_capacity_thread()) {
    refuse(sock);
    return false;
  }
  auto c = std::make_unique<HttpConn>(*this, sock);
  c->parked_at = SteadyClock::now();
  serve(std::move(c));
  return true;
}

void HttpServer::serve(std::unique_ptr<HttpConn> c) {
  const auto stopped = [this] { return this->stopped(); };
  ConnStream strm(*c, lim_.write_timeout, stopped);
  while (!stopped() && c->served < lim_.keep_alive_requests) {
    if (!c->request_ready() && !c->eof) c->take_available();
    c->answer_expect();
    if (c->cut && !c->request_ready()) {  // too slow while the cap was full
      reply_and_close(std::move(c), Canned::kUnreadable);
      return;
    }
    if (!c->request_ready()) {
      if (c->eof) break;
      const auto now = SteadyClock::now();
      if (now < c->deadline()) {
        if (WorkerPool::can_park()) {
          WorkerPool::park(std::move(c));
          return;
        }
        // No lobby to wait in: wait here.
        if (wait_for(c->sock, POLLIN, c->deadline(), stopped)) continue;
      }
      if (!c->started || stopped()) break;  // idle past the keep-alive time, or stopped
      // A request not whole by its deadline.
      reply_and_close(std::move(c), Canned::kUnreadable);
      return;
    }
    if (const HttpConn::Scan r = c->scan(); !r.head_done || r.bad_length) {
      reply_and_close(std::move(c), r.head_done ? Canned::kBadLength : Canned::kHeadTooLarge);
      return;
    } else if (r.unknown_method) {
      reply_and_close(std::move(c), Canned::kUnknownMethod);
      return;
    }
    strm.begin_request(c->first_byte + lim_.read_timeout);
    t_close_after = false;
    t_body_seconds = 0;
    t_last_request = c->served + 1 == lim_.keep_alive_requests;
    bool closed = false;
    const bool ok = process_request(strm, t_last_request, closed, nullptr);
    t_last_request = false;
    c->parked_at = SteadyClock::now();
    c->request_done();
    if (!ok || closed || t_close_after) break;
  }
  t_close_after = false;
  close_lingering(std::move(c));
}

void HttpServer::close_lingering(std::unique_ptr<HttpConn> c) {
  if (WorkerPool::can_park()) {
    c->start_draining();
    WorkerPool::park(std::move(c));
    return;
  }
  c->linger_here();
}

void HttpServer::reply_and_close(std::unique_ptr<HttpConn> c, Canned what) {
  const std::string reply = canned_ ? canned_(what) : std::string();
  for (size_t sent = 0; sent < reply.size();) {
    pollfd p{c->sock, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(lim_.write_timeout.count())) <= 0) break;
    const ssize_t w = ::send(c->sock, reply.data() + sent, reply.size() - sent, MSG_NOSIGNAL);
    if (w <= 0 && !(w < 0 && errno == EINTR)) break;
    if (w > 0) sent += static_cast<size_t>(w);
  }
  close_lingering(std::move(c));
}

// Over the cap (a refusing thread): a moment to start the request and a
// second to send its headers (the reply needs no body); no second request.
// One that sends nothing in time gets the refusal all the same.
void HttpServer::refuse(socket_t sock) {
  using std::chrono::milliseconds;
  if (WorkerPool::can_park_refused()) {
    auto c = std::make_unique<HttpConn>(*this, sock);
    c->parked_at = SteadyClock::now();
    WorkerPool::park_refused(std::move(c));
    return;
  }
  // No lobby: the refusing thread waits itself.
  auto c = std::make_unique<HttpConn>(*this, sock);
  ConnStream strm(*c, lim_.write_timeout, [this] { return stopped(); });
  const auto start = SteadyClock::now();
  while (!c->started && !c->eof && !stopped() &&
         wait_for(sock, POLLIN, start + milliseconds(100), [this] { return stopped(); }))
    c->take_available();
  if (!c->started) {
    if (stopped()) return;  // c closes
    reply_and_close(std::move(c), Canned::kTooManyConnections);
    return;
  }
  strm.begin_request(c->first_byte + std::min(lim_.read_timeout, milliseconds(1000)));
  t_close_after = false;
  t_body_seconds = 0;
  t_last_request = true;
  bool closed = false;
  process_request(strm, true, closed, nullptr);
  t_last_request = false;
  t_close_after = false;
  close_lingering(std::move(c));
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
