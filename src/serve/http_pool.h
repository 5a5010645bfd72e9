// The HTTP side's threads and connections: a bounded worker pool for
// cpp-httplib, and a way for a handler to notice that its client hung up.
#pragma once

#include <httplib.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

namespace edgelm::serve {

// The methods httplib routes; any other in a well-formed request line is
// answered 501 (HttpServer).
inline constexpr std::string_view kRoutedMethods[] = {"GET",   "HEAD",   "POST",   "PUT",
                                                      "PATCH", "DELETE", "OPTIONS"};

// s without its leading and trailing spaces and tabs (a header value's
// optional whitespace, RFC 9110 5.6.3).
inline std::string_view trim_blanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Whether a equals `lower`, which is in lower case, in any case (header
// names and tokens are case-insensitive ASCII).
inline bool iequals(std::string_view a, std::string_view lower) {
  if (a.size() != lower.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != lower[i]) return false;
  return true;
}

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

// From a handler or httplib's error and pre-routing handlers, on the thread
// serving the connection: close the connection once this response is
// written (a request whose body was refused unread leaves that body on the
// connection, where the next request would be looked for).
void close_after_response();

// The same handlers: the reply says "Connection: close", once. Where
// httplib will write that header itself (the request asked for the close,
// or is the last its connection may carry), nothing is added: httplib
// appends its own beside a handler's, and the reply would carry two.
void mark_close(const httplib::Request& req, httplib::Response& res);

// From httplib's pre-routing (or Expect) handler: the request's line and
// headers have been read, and its body is `body_bytes` long. While
// connections wait for a worker, a request gets one second from its first
// byte for its line and headers, and a second more plus one per 64 KiB for
// its body (HttpServer).
void request_headers_read(uint64_t body_bytes);

// httplib's task queue, bounded: `workers` threads serve connections; up to
// `cap` connections may be open; the rest go to kRefusers refusing threads,
// which hand them to the lobby (HttpServer: there such a connection gets
// 100 ms to start its request and a second to send its line and headers,
// then is admitted if the cap has room by then, or answered 503). The
// threads run `nice` steps below the process's priority (Linux nice is per
// thread): parsing, tokenizing and refusing a flood of requests must not take
// the cores the engine's steps need, or the admitted streams pay for the
// refused ones (8 clients retrying at once without waiting sent 2,200
// requests a second and held an admitted request's first token for 81 s).
//
// A connection waits for its next request off the workers: a worker that
// finds no whole request on its connection parks it with the pool's lobby
// thread, which polls every parked connection and hands one back to a
// worker when its request has come (or its time is up), so a worker is
// never held by a client that is slow to send, or idle between requests.
class WorkerPool : public httplib::TaskQueue {
 public:
  // A connection parked in the lobby (HttpServer's). Its methods other than
  // serve run on the lobby thread.
  class Parked {
   public:
    enum class Next { kWait, kServe, kDrop };
    virtual ~Parked() = default;  // closes the connection
    virtual int fd() const = 0;
    // The socket is readable (bytes, or the end of the stream).
    virtual Next readable() = 0;
    // Asked every 50 ms or so, `full` while the connection cap is full:
    // kWait until the connection's time is up (sooner while the cap is full).
    virtual Next check(std::chrono::steady_clock::time_point now, bool full) = 0;
    // On a worker: serves the connection's request(s); it may park again.
    virtual void serve(std::unique_ptr<Parked> self) = 0;
    // A connection accepted over the cap (park_refused): kServe from
    // readable or check means its request is in, or its time to send it is
    // up. Then, if the cap has room, it is admitted (counted, admitted(),
    // served); else refuse_now() answers it, and it stays parked until
    // readable or check says kDrop.
    virtual void admitted() = 0;
    virtual void refuse_now() = 0;
    bool over_cap = false;
    // Over the cap and not yet admitted or refused (at most `cap` such wait;
    // the rest are refused when accepted).
    bool undecided = false;
  };

  WorkerPool(int workers, int cap, int nice = 0);
  ~WorkerPool() override;
  void enqueue(std::function<void()> fn) override;
  void shutdown() override;
  int open() const;
  // On a thread of a pool: whether connections of that pool wait for a
  // worker (accepted, none free). False elsewhere.
  static bool backlog();
  // On a worker of a pool: whether its connection cap is full (the next
  // connection would be refused). False elsewhere.
  static bool crowded();
  // On a worker of a pool (not a refusing thread): the connection it serves
  // may be parked. Then park() takes it; it stays counted under the cap.
  static bool can_park();
  static void park(std::unique_ptr<Parked> p);
  // On a refusing thread: the lobby takes the connection over the cap
  // (not counted), refuses it or admits it if room has come by then. While
  // `cap` such connections are already waiting, it is refused at once
  // (refuse_now) and parked only to linger.
  static bool can_park_refused();
  static void park_refused(std::unique_ptr<Parked> p);

  static constexpr int kRefusers = 4;

 private:
  void loop(std::deque<std::function<void()>>& q, bool refusing);
  void lobby();
  // Queues `p`'s serve for a worker; false (p kept) once stopping.
  bool resume(std::unique_ptr<Parked>& p);
  bool at_cap() const;

  const int cap_;
  const int nice_;
  mutable std::mutex mu_;
  // One per queue, so that a connection wakes one worker of its own kind
  // (notify_all woke every idle worker, dozens of them, for each).
  std::condition_variable jobs_cv_, refusals_cv_;
  std::deque<std::function<void()>> jobs_, refusals_;
  std::vector<std::unique_ptr<Parked>> parking_;  // parked, not yet polled
  int wake_fd_ = -1;                              // eventfd: the lobby's doorbell
  std::atomic<bool> lobby_up_{false};             // false if the lobby cannot poll
  std::vector<std::thread> threads_;
  int open_ = 0;
  int undecided_ = 0;  // connections over the cap waiting in the lobby (Parked::undecided)
  bool stop_ = false;
};

// httplib's server with edgelm's own loop over a connection's requests
// (httplib 0.11's own bounds only each wait for bytes, so a client sending
// one byte a second held a worker for as long as it liked, and an idle
// connection held one for the whole keep-alive time):
// - a worker serves a connection only while it has a request to serve:
//   until a request is in (line, headers and body; of a longer one, the
//   first 64 KiB: HttpConn::kLobbyBytes), and between requests, the
//   connection waits in the pool's lobby;
// - a request (line, headers and body) must arrive whole within
//   read_timeout of its first byte, else it is answered 400 and the
//   connection closed; a body read on a worker, while connections wait for
//   a worker, must come at 64 KiB/s (plus a second);
// - between requests a connection may idle for keep_alive, but while the
//   connection cap is full only 200 ms before its first request and a
//   second after (a reply written while the cap is full closes its
//   connection, with Connection: close: server.cpp);
// - once the server stops (drain over), waits for a request end at once;
// - a connection over the cap waits in the lobby too: 100 ms to start its
//   request and a second for its line and headers; then it is admitted if
//   the cap has room, or answered 503 (one that sent nothing too) and
//   closed (lingering, as below);
// - lines ended by a bare LF are handed to httplib ended by CRLF, and empty
//   lines before a request line are dropped (RFC 9112 2.2);
// - every close lingers (in the lobby): the sending side is shut, and
//   bytes the client still sends (a refused body) are read and dropped
//   until it closes, 250 ms pass without one, or 2 s or 16 MiB in all, so
//   the close does not reset the connection before the client has read
//   the reply.
class HttpConn;

class HttpServer : public httplib::Server {
 public:
  struct Limits {
    std::chrono::milliseconds read_timeout{10000}, write_timeout{10000}, keep_alive{5000};
    int keep_alive_requests = 1000;
    uint64_t max_body = 100u << 20;  // a longer body is refused (server.cpp), not awaited
  };
  void set_limits(const Limits& l) { lim_ = l; }
  // Replies HttpServer writes itself, whole (status line to body), without
  // httplib: 503 for a connection over the cap that sent no request within
  // its 100 ms (on a refusing thread); 400 `unreadable_request` for a
  // request not whole in time, 400 `invalid_content_length` for a
  // Content-Length that is not digits as sent, 431 for a line and headers
  // over 64 KiB, 501 for a method that httplib does not route. Each closes
  // its connection.
  enum class Canned { kTooManyConnections, kUnreadable, kBadLength, kHeadTooLarge, kUnknownMethod };
  void set_canned_reply(std::function<std::string(Canned)> f) { canned_ = std::move(f); }

 private:
  friend class HttpConn;
  bool process_and_close_socket(socket_t sock) override;
  // Serves the requests that have come on `c`, then parks or closes it.
  void serve(std::unique_ptr<HttpConn> c);
  void refuse(socket_t sock);
  // Writes the canned reply `what` on `c` and closes it.
  void reply_and_close(std::unique_ptr<HttpConn> c, Canned what);
  // Closes `c` after a lingering read of what its client still sends
  // (HttpConn::start_draining: in the lobby where there is one, else here).
  void close_lingering(std::unique_ptr<HttpConn> c);
  bool stopped() const { return svr_sock_ == INVALID_SOCKET; }

  Limits lim_;
  std::function<std::string(Canned)> canned_;
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
