// The HTTP worker pool: its threads run below the engine's CPU priority.
// HttpServer's connection loop: whole-request deadlines, the lobby where
// slow and idle connections wait off the workers, refusals that do not
// queue, bodies refused unread, HTTP/1.0 and bare LF.
#include "serve/http_pool.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>

#include <poll.h>

#include <nlohmann/json.hpp>

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

// ---- HttpServer's connection loop -------------------------------------

using SteadyClock = std::chrono::steady_clock;

double seconds_since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

// Reads from `fd` until the peer closes it or `seconds` pass; `closed` says
// which.
std::string read_until_closed(int fd, double seconds, bool* closed) {
  std::string got;
  *closed = false;
  const auto end = SteadyClock::now() + std::chrono::duration<double>(seconds);
  while (SteadyClock::now() < end) {
    pollfd p{fd, POLLIN, 50};
    if (::poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      *closed = true;
      break;
    }
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

// A connection that has sent `bytes` (a request's beginning), or -1.
int connect_and_send(int port, const std::string& bytes) {
  const int fd = test::connect_loopback(port);
  if (fd >= 0 &&
      ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends `bytes` on a new connection and reads until the server closes it
// or `seconds` pass (`closed` says which).
std::string exchange(int port, const std::string& bytes, double seconds, bool* closed) {
  *closed = false;
  const int fd = connect_and_send(port, bytes);
  EXPECT_GE(fd, 0);
  if (fd < 0) return {};
  std::string got = read_until_closed(fd, seconds, closed);
  ::close(fd);
  return got;
}

// `got` is a reply of `status` whose error code is `code`, and the server
// closed the connection after it.
void expect_reply(const std::string& got, const std::string& status, const std::string& code,
                  bool closed) {
  EXPECT_EQ(got.rfind("HTTP/1.1 " + status, 0), 0u) << got;
  EXPECT_NE(got.find("\"" + code + "\""), std::string::npos) << got;
  EXPECT_TRUE(closed) << got;
}

// A health check on a new connection is answered 200.
void expect_health(const test::LiveServer& s) {
  auto r = s.client().Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

test::LiveServer::Options small_server(int workers, int cap, int keep_alive_s, int read_timeout_s) {
  test::LiveServer::Options o;
  o.slots = 1;
  o.server.http_threads = workers;
  o.server.max_connections = cap;
  o.server.keep_alive_s = keep_alive_s;
  o.server.read_timeout_s = read_timeout_s;
  return o;
}

// A chunked body is refused before httplib reads it (httplib 0.11 would
// read it whole, past --max-body): 411, and the connection closes.
TEST(HttpServer, AChunkedBodyIsRefusedUnread) {
  test::LiveServer s(small_server(4, 16, 5, 10));
  bool closed = false;
  const std::string got =
      exchange(s.port,
               "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Transfer-Encoding: chunked\r\n\r\n100000\r\n",
               5, &closed);
  EXPECT_EQ(got.rfind("HTTP/1.1 411", 0), 0u) << got;
  EXPECT_NE(got.find("length_required"), std::string::npos) << got;
  EXPECT_TRUE(closed) << "the refused body is on the connection: it closes";
  expect_health(s);
}

TEST(HttpServer, AContentLengthMustBeOneNumber) {
  test::LiveServer s(small_server(4, 16, 5, 10));
  for (const std::string cl :
       {"Content-Length: abc", "Content-Length: +2", "Content-Length: -5",
        "Content-Length: 2\r\nContent-Length: 3", "Content-Length: 99999999999999999999",
        "Content-Length: %32"}) {  // httplib decodes %32 to 2
    const std::string req =
        "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + cl +
        "\r\n\r\n{}";
    const std::string got = test::send_and_hang_up(s.port, req, 1500);
    EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << cl << ": " << got;
    EXPECT_NE(got.find("invalid_content_length"), std::string::npos) << cl << ": " << got;
  }
  // The same header twice with one value is one length.
  const std::string body = R"({"content":"hi"})";
  const std::string twice =
      "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n\r\n" + body;
  const std::string got = test::send_and_hang_up(s.port, twice, 1500);
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
}

// A body on a GET is refused and the connection closed: httplib does not
// read it, and kept on the connection it would be taken for the next
// request (one hidden inside would be answered).
TEST(HttpServer, ABodyOnAGetIsRefusedNotRunAsARequest) {
  test::LiveServer s(small_server(4, 16, 5, 10));
  const std::string inner = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
  bool closed = false;
  const std::string got = exchange(s.port,
                                   "GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                                       std::to_string(inner.size()) + "\r\n\r\n" + inner,
                                   5, &closed);
  EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << got;
  EXPECT_NE(got.find("unexpected_body"), std::string::npos) << got;
  EXPECT_EQ(got.find("HTTP/1.1", 5), std::string::npos) << "a second reply: " << got;
  EXPECT_TRUE(closed);
}

// A POST without a length is refused at once (httplib would read its body
// until the client closed, or the read timeout ran out).
TEST(HttpServer, APostWithoutALengthIsRefusedAtOnce) {
  test::LiveServer s(small_server(4, 16, 5, 30));
  bool closed = false;
  const std::string got = exchange(
      s.port, "POST /tokenize HTTP/1.1\r\nHost: x\r\n\r\n{\"content\":\"hi\"}", 10, &closed);
  EXPECT_EQ(got.rfind("HTTP/1.1 411", 0), 0u) << got;
  EXPECT_TRUE(closed) << "answered only at the read timeout, or not closed";
}

// Expect: 100-continue hears the refusal before uploading a body that
// would not be read; an acceptable request is invited as before.
TEST(HttpServer, ExpectContinueHearsARefusalFirst) {
  test::LiveServer s(small_server(4, 16, 5, 10));
  const auto ask = [&](const std::string& headers) {
    const int fd =
        connect_and_send(s.port,
                         "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         "Expect: 100-continue\r\n" +
                             headers + "\r\n");
    EXPECT_GE(fd, 0);
    bool closed = false;
    std::string got = read_until_closed(fd, 1.5, &closed);
    if (got.rfind("HTTP/1.1 100", 0) == 0) {
      const std::string body = R"({"content":"hi"})";
      (void)!::send(fd, body.data(), body.size(), MSG_NOSIGNAL);
      got += read_until_closed(fd, 1.5, &closed);
    }
    ::close(fd);
    return got;
  };
  const std::string big = ask("Content-Length: 99999999\r\n");
  EXPECT_EQ(big.rfind("HTTP/1.1 413", 0), 0u) << big;
  EXPECT_NE(big.find("body_too_large"), std::string::npos) << big;
  const std::string chunked = ask("Transfer-Encoding: chunked\r\n");
  EXPECT_EQ(chunked.rfind("HTTP/1.1 411", 0), 0u) << chunked;
  const std::string fine = ask("Content-Length: 16\r\nConnection: close\r\n");
  EXPECT_EQ(fine.rfind("HTTP/1.1 100", 0), 0u) << fine;
  EXPECT_NE(fine.find("HTTP/1.1 200"), std::string::npos) << fine;
}

// A request must arrive whole within the read timeout of its first byte:
// a client sending a byte every 200 ms is cut off after about a second,
// long before it would have finished.
TEST(HttpServer, ASlowSenderIsCutOffAtTheReadTimeout) {
  test::LiveServer s(small_server(4, 16, 5, 1));
  const int fd =
      connect_and_send(s.port, "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n");
  ASSERT_GE(fd, 0);
  const auto start = SteadyClock::now();
  bool closed = false;
  std::string reply;
  for (int i = 0; i < 100 && !closed; ++i) {  // 100 bytes over 20 s
    if (::send(fd, "x", 1, MSG_NOSIGNAL) != 1) break;
    reply += read_until_closed(fd, 0.2, &closed);
  }
  const double took = seconds_since(start);
  if (!closed) reply += read_until_closed(fd, 2, &closed);
  ::close(fd);
  EXPECT_TRUE(closed);
  EXPECT_LT(took, 8.0) << "the connection lived as long as the client kept sending";
  EXPECT_EQ(reply.rfind("HTTP/1.1 400", 0), 0u) << reply;
  EXPECT_NE(reply.find("unreadable_request"), std::string::npos) << reply;
}

// Opens `n` connections that send nothing, then asks for /health (a minute
// to answer); `took` is how long the answer took.
httplib::Result health_behind_idle_connections(const test::LiveServer& s, int n, double* took) {
  std::vector<int> idle;
  for (int i = 0; i < n; ++i) idle.push_back(test::connect_loopback(s.port));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = SteadyClock::now();
  auto r = s.client(60).Get("/health");
  *took = seconds_since(start);
  for (int fd : idle) ::close(fd);
  return r;
}

// Three clients sending a byte every 100 ms on two workers (read timeout
// 60 s), in their headers or in a 100 kB body, wait in the lobby (a body
// longer than it keeps goes to a worker only once 64 KiB of it have come):
// a health check is not kept waiting (before the lobby, a second for the
// headers and 2.5 s for the bodies, when the rules below gave up on them).
TEST(HttpServer, SlowRequestsGiveWayToWaitingConnections) {
  const std::string padding(200, 'a');
  for (const bool in_body : {false, true}) {
    test::LiveServer s(small_server(2, 64, 5, 60));
    std::atomic<bool> done{false};
    std::vector<std::thread> slow;
    for (int i = 0; i < 3; ++i) {
      slow.emplace_back([&] {
        const int fd = connect_and_send(
            s.port,
            in_body ? "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" : "P");
        const std::string rest =
            in_body ? padding : "OST /tokenize HTTP/1.1\r\nX-Padding: " + padding;
        for (const char c : rest) {
          if (done || ::send(fd, &c, 1, MSG_NOSIGNAL) != 1) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        ::close(fd);
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const auto start = SteadyClock::now();
    auto r = s.client(60).Get("/health");
    const double took = seconds_since(start);
    done = true;
    for (auto& t : slow) t.join();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_LT(took, 2.0) << "the health check waited behind slow "
                         << (in_body ? "bodies" : "headers");
  }
}

// Connections that send nothing wait in the lobby, not on a worker: with 2
// workers, 6 idle connections and a keep-alive of 60 s, a health check is
// answered at once, not after the idle ones' 60 s turns.
TEST(HttpServer, IdleConnectionsGiveWayToWaitingOnes) {
  test::LiveServer s(small_server(2, 64, 60, 10));
  double took = 0;
  const auto r = health_behind_idle_connections(s, 6, &took);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_LT(took, 20.0);
}

// Connections over the cap are refused by several threads, each giving a
// silent connection 100 ms: 40 idle ones over a cap of 2 do not hold a
// health check for their keep-alive time each.
TEST(HttpServer, ConnectionsOverTheCapAreRefusedWithoutQueueing) {
  test::LiveServer s(small_server(2, 2, 60, 10));
  double took = 0;
  const auto r = health_behind_idle_connections(s, 42, &took);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->status == 503 || r->status == 200) << r->status;
  if (r->status == 503) {
    EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  }
  EXPECT_LT(took, 20.0);
}

// A connection idle between requests waits in the lobby, not on a worker:
// with one of two workers streaming and another connection idle after its
// reply (keep-alive 60 s), a new connection is answered while the idle one
// stays open, and the idle one's next request is answered too, its reply
// not closing it.
TEST(HttpServer, AnIdleConnectionHoldsNoWorker) {
  auto o = small_server(2, 64, 60, 10);
  o.step_ms = 20;  // a stream of 100 tokens holds a worker about 2 s
  test::LiveServer s(o);
  auto stream = std::async(std::launch::async, [&] {
    return s.client().Post("/v1/chat/completions", test::chat_body("hi", 100, true),
                           "application/json");
  });
  ASSERT_TRUE(test::wait_until([&] { return s.engine->active_slots() > 0; }, 10));
  const std::string health = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  const int b = connect_and_send(s.port, health);
  ASSERT_GE(b, 0);
  bool closed = false;
  const std::string first = read_until_closed(b, 0.3, &closed);
  EXPECT_EQ(first.rfind("HTTP/1.1 200", 0), 0u) << first;
  bool c_closed = false;
  const std::string other = exchange(s.port, health, 3, &c_closed);
  EXPECT_EQ(other.rfind("HTTP/1.1 200", 0), 0u) << "the new connection was served: " << other;
  ASSERT_EQ(::send(b, health.data(), health.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(health.size()));
  const std::string second = read_until_closed(b, 0.5, &closed);
  ::close(b);
  EXPECT_EQ(second.rfind("HTTP/1.1 200", 0), 0u) << "the idle connection was kept: " << second;
  EXPECT_EQ(second.find("Connection: close"), std::string::npos) << second;
  EXPECT_FALSE(closed);
  auto r = stream.get();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// While the connection cap is full, connections idle in the lobby give way
// (a new one after 200 ms): four silent connections fill a cap of four, a
// fifth is refused, and soon after silent ones are closed (as many as make
// room: once one has gone the cap is no longer full) and a health check
// gets in.
TEST(HttpServer, WhileTheCapIsFullIdleConnectionsGiveWay) {
  test::LiveServer s(small_server(2, 4, 60, 10));
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(test::connect_loopback(s.port));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  bool closed = false;
  const std::string refused =
      exchange(s.port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 2, &closed);
  EXPECT_EQ(refused.rfind("HTTP/1.1 503", 0), 0u) << refused;
  int gone = 0;
  for (const int fd : idle) {
    read_until_closed(fd, gone == 0 ? 3 : 0.1, &closed);
    gone += closed ? 1 : 0;
    ::close(fd);
  }
  EXPECT_GE(gone, 1) << "the silent connections kept their places under a full cap";
  expect_health(s);
}

// A connection over the cap that is slow to send its request still gets
// the 503 and its Retry-After, not a silent close.
TEST(HttpServer, ASilentConnectionOverTheCapGetsThe503) {
  test::LiveServer s(small_server(2, 2, 60, 10));
  std::vector<int> busy;  // two requests in progress hold the cap
  for (int i = 0; i < 2; ++i)
    busy.push_back(connect_and_send(s.port, "POST /tokenize HTTP/1.1\r\n"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const int fd = test::connect_loopback(s.port);
  ASSERT_GE(fd, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  const std::string health = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  (void)!::send(fd, health.data(), health.size(), MSG_NOSIGNAL);
  bool closed = false;
  const std::string got = read_until_closed(fd, 3, &closed);
  ::close(fd);
  for (int b : busy) ::close(b);
  EXPECT_EQ(got.rfind("HTTP/1.1 503", 0), 0u) << got;
  EXPECT_NE(got.find("Retry-After: 1"), std::string::npos) << got;
  EXPECT_NE(got.find("too_many_connections"), std::string::npos) << got;
  EXPECT_TRUE(closed);
}

// Requests sent together on one connection are all answered (the
// connection's bytes are read into one buffer for all its requests).
TEST(HttpServer, PipelinedRequestsAreAllAnswered) {
  test::LiveServer s(small_server(4, 16, 5, 10));
  const std::string two =
      "GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /ready HTTP/1.1\r\nHost: x\r\nConnection: "
      "close\r\n\r\n";
  const std::string got = test::send_and_hang_up(s.port, two, 2000);
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
  EXPECT_NE(got.find("HTTP/1.1 200", 5), std::string::npos) << got;
}

// The part of `reply` before its blank line.
std::string head_of(const std::string& reply) {
  return reply.substr(0, reply.find("\r\n\r\n"));
}

// How many "Connection" header lines the head of `reply` has.
int connection_headers(const std::string& reply) {
  int n = 0;
  const std::string head = head_of(reply);
  for (size_t at = 0; (at = head.find("\r\n", at)) != std::string::npos; at += 2) {
    std::string name = head.substr(at + 2, 11);
    for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    n += name == "connection:";
  }
  return n;
}

// A refusal that closes its connection says so in one header, whether or
// not the client asked for the close itself (httplib then writes its own),
// and when the refused request is the last its connection may carry.
TEST(HttpServer, AClosingReplySaysSoOnce) {
  test::LiveServer s(small_server(4, 16, 5, 10));
  const std::string chunked =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n";
  for (const std::string& req :
       {chunked + "\r\n", chunked + "Connection: close\r\n\r\n",
        chunked + "Connection: Close\r\n\r\n",
        std::string("BR(EW /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        std::string("BR(EW /health HTTP/1.1\r\nHost: x\r\n\r\n")}) {
    bool closed = false;
    const std::string got = exchange(s.port, req, 5, &closed);
    EXPECT_EQ(got.rfind("HTTP/1.1 4", 0), 0u) << got;
    EXPECT_EQ(connection_headers(got), 1) << head_of(got);
    EXPECT_NE(head_of(got).find("Connection: close"), std::string::npos) << head_of(got);
    EXPECT_TRUE(closed);
  }
  // The connection's 1000th request (test::LiveServer: keep-alive for
  // 1000), refused.
  std::string many;
  for (int i = 0; i < 999; ++i) many += "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string got = test::send_and_hang_up(s.port, many + chunked + "\r\n", 5000);
  const size_t last = got.rfind("HTTP/1.1 ");
  ASSERT_NE(last, std::string::npos) << got.substr(0, 300);
  const std::string reply = got.substr(last);
  EXPECT_EQ(reply.rfind("HTTP/1.1 411", 0), 0u) << reply;
  EXPECT_EQ(connection_headers(reply), 1) << head_of(reply);
}

// An HTTP/1.0 client knows no chunked encoding: a streamed answer is sent
// as it comes and ends when the server closes the connection, which the
// reply says (and no Keep-Alive): even when the client asked to keep the
// connection, which an answer sent whole, with its length, does.
TEST(HttpServer, AnHttp10StreamEndsWithTheConnectionNotInChunks) {
  test::LiveServer s(small_server(4, 16, 5, 10));
  for (const std::string connection : {"", "Connection: Keep-Alive\r\n"}) {
    for (const bool stream : {true, false}) {
      const std::string body = test::chat_body("hi", 5, stream);
      bool closed = false;
      const std::string got = exchange(
          s.port,
          "POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\n" + connection +
              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body,
          connection.empty() || stream ? 5 : 1, &closed);
      const std::string head = head_of(got);
      SCOPED_TRACE(connection + (stream ? "streamed" : "whole"));
      EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
      EXPECT_EQ(head.find("Transfer-Encoding"), std::string::npos) << head;
      if (stream || connection.empty()) {
        EXPECT_EQ(head.find("Keep-Alive"), std::string::npos) << head;
        EXPECT_TRUE(closed);
      } else {  // sent whole, with its length: the connection stays
        EXPECT_NE(head.find("Connection: Keep-Alive"), std::string::npos) << head;
        EXPECT_FALSE(closed);
      }
      const std::string rest = got.substr(std::min(got.size(), head.size() + 4));
      if (stream) {
        EXPECT_NE(head.find("Connection: close"), std::string::npos) << head;
        EXPECT_EQ(rest.rfind("data: {", 0), 0u) << "a chunk size before the event: " << rest;
        EXPECT_NE(rest.find("data: [DONE]\n\n"), std::string::npos) << rest;
        EXPECT_EQ(rest.find("\r\n0\r\n"), std::string::npos) << "a last chunk: " << rest;
      } else {
        const auto j = nlohmann::json::parse(rest, nullptr, false);
        EXPECT_FALSE(j.is_discarded()) << rest;
      }
    }
  }
  EXPECT_TRUE(s.wait_idle());
}

// HTTP/1.0 replies say whether the connection stays: it does when the
// client asked (Connection: Keep-Alive), and is closed otherwise; neither
// reply advertises a Keep-Alive the server will not keep.
TEST(HttpServer, AnHttp10ConnectionPersistsOnlyWhenAsked) {
  test::LiveServer s(small_server(4, 16, 5, 10));
  bool closed = false;
  std::string got = exchange(s.port, "GET /health HTTP/1.0\r\n\r\n", 3, &closed);
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
  EXPECT_NE(head_of(got).find("Connection: close"), std::string::npos) << got;
  EXPECT_EQ(head_of(got).find("Keep-Alive"), std::string::npos) << got;
  EXPECT_TRUE(closed);
  got = exchange(s.port,
                 "GET /health HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"
                 "GET /ready HTTP/1.0\r\n\r\n",
                 3, &closed);
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
  EXPECT_NE(head_of(got).find("Connection: Keep-Alive"), std::string::npos) << got;
  const size_t second = got.find("HTTP/1.1 200", 5);
  ASSERT_NE(second, std::string::npos) << "the kept connection's next request: " << got;
  EXPECT_NE(head_of(got.substr(second)).find("Connection: close"), std::string::npos) << got;
  EXPECT_TRUE(closed);
}

// Lines ended by a bare LF are read as lines (RFC 9112 2.2 allows it, and
// `printf 'GET /health HTTP/1.0\n\n' | nc` is how some check a server), and
// empty lines before a request (a CRLF some clients send after a body) are
// skipped instead of answered 400. A body keeps its bytes as sent.
TEST(HttpServer, BareLineFeedsAndEmptyLinesBeforeARequestAreRead) {
  test::LiveServer s(small_server(4, 16, 5, 10));
  bool closed = false;
  std::string got = exchange(s.port, "GET /health HTTP/1.0\n\n", 3, &closed);
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
  EXPECT_TRUE(closed);
  const std::string body = "{\n\"content\":\"hi\"\n}";  // LFs a rewrite of the body would change
  got = exchange(s.port,
                 "\r\n\r\nGET /health HTTP/1.1\nHost: x\n\nPOST /tokenize HTTP/1.1\nHost: x\n"
                 "Content-Length: " +
                     std::to_string(body.size()) + "\n\n" + body +
                     "\r\nGET /ready HTTP/1.1\r\nConnection: close\r\n\r\n",
                 3, &closed);
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
  const size_t second = got.find("HTTP/1.1 ", 5);
  ASSERT_NE(second, std::string::npos) << got;
  EXPECT_EQ(got.substr(second, 12), "HTTP/1.1 200") << got;
  EXPECT_NE(got.find("{\"tokens\":[", second), std::string::npos) << got;
  const size_t third = got.find("HTTP/1.1 ", second + 5);
  ASSERT_NE(third, std::string::npos) << "the request after the body's CRLF: " << got;
  EXPECT_EQ(got.substr(third, 12), "HTTP/1.1 200") << got;
  EXPECT_NE(got.find("\"ready\"", third), std::string::npos) << got;
  EXPECT_TRUE(closed);
}

// A bare CR is taken as a space, the same way by the lobby and by the
// stream handed to httplib: a "\r\r\n" line is a header line, not the end
// of the headers, and the request after it is answered on its own.
TEST(HttpServer, ABareCrIsOneLineForTheLobbyAndHttplib) {
  test::LiveServer s(small_server(4, 16, 5, 10));
  bool closed = false;
  const std::string got =
      exchange(s.port,
               "GET /health HTTP/1.1\r\n\r\r\nX: y\n\nGET /ready HTTP/1.1\r\nHost: x\r\n"
               "Connection: close\r\n\r\n",
               3, &closed);
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
  const size_t second = got.find("HTTP/1.1 ", 5);
  ASSERT_NE(second, std::string::npos) << "the second request was swallowed: " << got;
  EXPECT_NE(got.find("\"ready\"", second), std::string::npos) << got;
  EXPECT_TRUE(closed);
}

// A request line or header that never ends is refused at 64 KiB (431),
// without waiting for the read timeout (httplib would keep the line whole,
// growing, until then).
TEST(HttpServer, ALineThatNeverEndsIsRefusedAt64KiB) {
  test::LiveServer s(small_server(4, 16, 5, 30));
  for (const std::string start : {"GET /", "GET /health HTTP/1.1\r\nX-Long: "}) {
    const int fd = connect_and_send(s.port, start + std::string(70 * 1024, 'a'));
    ASSERT_GE(fd, 0);
    bool closed = false;
    const std::string got = read_until_closed(fd, 5, &closed);
    ::close(fd);
    EXPECT_EQ(got.rfind("HTTP/1.1 431", 0), 0u) << start << ": " << got.substr(0, 200);
    EXPECT_NE(got.find("headers_too_large"), std::string::npos) << got.substr(0, 300);
    EXPECT_TRUE(closed);
  }
}

// A well-formed request line with a method the server does not know is
// answered 501 (RFC 9110), not httplib's 400 for a malformed line; with a
// body announced, at once, without waiting for it. A line that is not of
// the form "METHOD target HTTP/1.x" stays a 400.
TEST(HttpServer, AnUnknownMethodIsAnswered501) {
  test::LiveServer s(small_server(4, 16, 5, 30));
  for (const std::string head :
       {"BREW /health HTTP/1.1\r\nHost: x\r\n\r\n", "get /health HTTP/1.1\r\nHost: x\r\n\r\n",
        "PROPFIND /v1/models HTTP/1.0\r\n\r\n", "TRACE /health HTTP/1.1\r\nHost: x\r\n\r\n",
        "M-SEARCH * HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"}) {
    const auto start = SteadyClock::now();
    bool closed = false;
    const std::string got = exchange(s.port, head, 10, &closed);
    expect_reply(got, "501 Not Implemented", "method_not_implemented", closed);
    EXPECT_NE(got.find("(GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS)"), std::string::npos)
        << head << ": the reply names the methods served: " << got;
    EXPECT_LT(seconds_since(start), 5.0) << head << ": the reply waited for the body";
  }
  for (const std::string head :
       {"BR(EW /health HTTP/1.1\r\nHost: x\r\n\r\n", "BREW /health HTTP/2.0\r\nHost: x\r\n\r\n",
        "BREW\r\nHost: x\r\n\r\n", " BREW /health HTTP/1.1\r\n\r\n", "BREW HTTP/1.1\r\n\r\n",
        "\x16\x03\x01\x02\x01 HTTP/1.1\r\n\r\n"}) {
    bool closed = false;
    const std::string got = exchange(s.port, head, 10, &closed);
    EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << head << ": " << got;
  }
  // Known methods keep their answers: routed (405 where the path takes
  // others) or served.
  bool closed = false;
  std::string got = exchange(
      s.port, "OPTIONS /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 10, &closed);
  EXPECT_EQ(got.rfind("HTTP/1.1 405", 0), 0u) << got;
  expect_health(s);
}

// A compressed body is refused 415 before it is read: httplib would
// inflate it whole, and --max-body bounds only the bytes sent (a few KB of
// gzip can inflate to hundreds of MB). Identity, in any case, is taken.
TEST(HttpServer, ACompressedBodyIsRefused415) {
  test::LiveServer s(small_server(4, 16, 5, 30));
  const std::string body = R"({"content":"hi"})";
  const auto post = [&](const std::string& encoding) {
    bool closed = false;
    std::string got =
        exchange(s.port,
                 "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Encoding: " + encoding +
                     "\r\nContent-Length: " + std::to_string(body.size()) +
                     "\r\nConnection: close\r\n\r\n" + body,
                 10, &closed);
    return std::make_pair(got, closed);
  };
  for (const std::string enc :
       {"gzip", "GZIP", "deflate", "br", "x-gzip", "identity, gzip", " zstd "}) {
    const auto [got, closed] = post(enc);
    expect_reply(got, "415 Unsupported Media Type", "unsupported_content_encoding", closed);
    EXPECT_NE(got.find("Accept-Encoding: identity\r\n"), std::string::npos) << enc << ": " << got;
  }
  for (const std::string enc : {"identity", "Identity", " identity ,identity", ""}) {
    const auto [got, closed] = post(enc);
    EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << enc << ": " << got;
  }
  // Without a body there is nothing to inflate.
  bool closed = false;
  const std::string got = exchange(
      s.port,
      "GET /health HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nConnection: close\r\n\r\n", 10,
      &closed);
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
  expect_health(s);
}

// A Range header is ignored: the whole reply, 200. (httplib built each
// range's copy in memory: 1000 ranges of the 27 KB status page made a
// 27.5 MB reply.)
TEST(HttpServer, RangesAreIgnored) {
  test::LiveServer s(small_server(4, 16, 5, 30));
  auto c = s.client();
  const auto whole = c.Get("/");
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200);
  std::string many = "bytes=0-";
  for (int i = 0; i < 200; ++i) many += ",0-";
  for (const std::string& range : {std::string("bytes=0-9"), many}) {
    const auto r = c.Get("/", {{"Range", range}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << range.substr(0, 20);
    EXPECT_EQ(r->body, whole->body);
    EXPECT_FALSE(r->has_header("Content-Range"));
  }
  const auto m = c.Get("/v1/models", {{"Range", "bytes=0-3"}});
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_GT(m->body.size(), 4u);
}

// Replies are compressed with gzip where the client takes it, else not at
// all: never brotli (httplib's choice where it is listed, at a CPU cost
// about 25 times gzip's).
TEST(HttpServer, RepliesAreGzippedOrPlain) {
  test::LiveServer s(small_server(4, 16, 5, 30));
  const auto encoding_for = [&](const std::string& accept) {
    bool closed = false;
    const std::string got = exchange(
        s.port,
        "GET / HTTP/1.1\r\nHost: x\r\nAccept-Encoding: " + accept + "\r\nConnection: close\r\n\r\n",
        10, &closed);
    EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << accept << ": " << got.substr(0, 200);
    const std::string head = got.substr(0, got.find("\r\n\r\n") + 2);
    const size_t at = head.find("Content-Encoding: ");
    if (at == std::string::npos) return std::string("none");
    return head.substr(at + 18, head.find("\r\n", at) - at - 18);
  };
  EXPECT_EQ(encoding_for("gzip, deflate, br"), "gzip");
  EXPECT_EQ(encoding_for("br"), "none");
  EXPECT_EQ(encoding_for("br, gzip;q=0"), "none");
  EXPECT_EQ(encoding_for("GZIP;q=0.5"), "gzip");
  EXPECT_EQ(encoding_for("*"), "gzip");
  EXPECT_EQ(encoding_for("identity"), "none");
  EXPECT_EQ(encoding_for("br\r\nAccept-Encoding: gzip"), "gzip");  // two header lines
}

// An absolute-form target is served as its path (RFC 9112 3.2.2).
TEST(HttpServer, AnAbsoluteFormTargetIsServedAsItsPath) {
  test::LiveServer s(small_server(4, 16, 5, 30));
  const auto get = [&](const std::string& target) {
    bool closed = false;
    return exchange(s.port, "GET " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    10, &closed);
  };
  for (const std::string target :
       {"http://x/health", "HTTP://board:8080/health", "https://x/health?a=1"}) {
    const std::string got = get(target);
    EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << target << ": " << got;
    EXPECT_NE(got.find(R"({"status":"ok"})"), std::string::npos) << target << ": " << got;
  }
  const std::string page = get("http://board:8080");
  EXPECT_EQ(page.rfind("HTTP/1.1 200", 0), 0u) << page.substr(0, 200);
  EXPECT_NE(page.find("text/html"), std::string::npos) << page.substr(0, 200);
  EXPECT_EQ(get("http://x/nowhere").rfind("HTTP/1.1 404", 0), 0u);
  bool closed = false;
  const std::string body = R"({"content":"hi"})";
  const std::string got =
      exchange(s.port,
               "POST http://x/tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                   std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body,
               10, &closed);
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
  EXPECT_NE(got.find("\"tokens\""), std::string::npos) << got;
}

// A request whose line is still coming at the read timeout is answered
// 400 too (httplib closes such a connection without a word).
TEST(HttpServer, ARequestLineNotWholeInTimeIsAnswered400) {
  test::LiveServer s(small_server(4, 16, 5, 1));
  const int fd = connect_and_send(s.port, "GET /hea");
  ASSERT_GE(fd, 0);
  bool closed = false;
  const std::string got = read_until_closed(fd, 5, &closed);
  ::close(fd);
  expect_reply(got, "400", "unreadable_request", closed);
}

// A length over --max-body is refused as soon as the headers are read
// (httplib would first wait to skip the body it announces).
TEST(HttpServer, ALengthOverTheBodyLimitIsRefusedAtOnce) {
  test::LiveServer s(small_server(4, 16, 5, 30));
  const auto start = SteadyClock::now();
  bool closed = false;
  const std::string got = exchange(
      s.port, "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 9999999999999999999\r\n\r\n{",
      10, &closed);
  expect_reply(got, "413", "body_too_large", closed);
  EXPECT_LT(seconds_since(start), 5.0) << "the refusal waited for the body";
}

// While the connection cap is full, a request gets a second for its line
// and headers: connections that send a few bytes cannot hold every place
// for the read timeout.
TEST(HttpServer, WhileTheCapIsFullAHeadGetsASecond) {
  test::LiveServer s(small_server(2, 2, 60, 60));
  std::vector<int> partial;
  for (int i = 0; i < 2; ++i) partial.push_back(connect_and_send(s.port, "GET /hea"));
  for (const int fd : partial) {
    bool closed = false;
    const std::string got = read_until_closed(fd, 10, &closed);
    ::close(fd);
    EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << got;
    EXPECT_TRUE(closed) << "a partial request held its place under a full cap";
  }
  expect_health(s);
}

// "Expect: 100-continue" is answered from the lobby and the body awaited
// there: ten clients that are invited and then send nothing do not hold
// the two workers, and one that sends its body after the invitation is
// answered, once (no second "100 Continue"). An HTTP/1.0 request's Expect
// is ignored.
TEST(HttpServer, ExpectContinueIsAnsweredWithoutAWorker) {
  test::LiveServer s(small_server(2, 64, 60, 60));
  const std::string head =
      "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Expect: 100-continue\r\nContent-Length: 16\r\n\r\n";
  std::vector<int> silent;
  for (int i = 0; i < 10; ++i) silent.push_back(connect_and_send(s.port, head));
  for (const int fd : silent) {
    bool closed = false;
    const std::string got = read_until_closed(fd, 0.5, &closed);
    EXPECT_EQ(got, "HTTP/1.1 100 Continue\r\n\r\n");
  }
  const auto start = SteadyClock::now();
  auto r = s.client(60).Get("/health");
  const double took = seconds_since(start);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_LT(took, 2.0) << "the health check waited behind invited bodies";
  const int fd = connect_and_send(s.port, head);
  bool closed = false;
  EXPECT_EQ(read_until_closed(fd, 0.5, &closed), "HTTP/1.1 100 Continue\r\n\r\n");
  const std::string body = "{\"content\":\"hi\"}";
  ASSERT_EQ(body.size(), 16u);
  ASSERT_EQ(::send(fd, body.data(), body.size(), MSG_NOSIGNAL), 16);
  const std::string got = read_until_closed(fd, 1, &closed);
  ::close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
  EXPECT_NE(got.find("\"tokens\""), std::string::npos) << got;
  for (const int f : silent) ::close(f);
  // HTTP/1.0 knows no Expect: no invitation; the body is awaited.
  const int fd10 = connect_and_send(
      s.port,
      "POST /tokenize HTTP/1.0\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n"
      "Content-Length: 16\r\n\r\n");
  EXPECT_EQ(read_until_closed(fd10, 0.5, &closed), "") << "an invitation to an HTTP/1.0 client";
  ASSERT_EQ(::send(fd10, body.data(), body.size(), MSG_NOSIGNAL), 16);
  const std::string got10 = read_until_closed(fd10, 3, &closed);
  ::close(fd10);
  EXPECT_EQ(got10.rfind("HTTP/1.1 200", 0), 0u) << got10;
  EXPECT_TRUE(closed);
}

// Connections over the cap wait for their request in the lobby too, so a
// flood of silent ones does not queue a refusal behind their 100 ms each
// (four refusing threads took 40 of them 3.5 s); and one whose request
// comes after room has been made is admitted, not refused.
TEST(HttpServer, OverTheCapAFloodDoesNotDelayRefusalsAndRoomAdmits) {
  test::LiveServer s(small_server(2, 2, 60, 60));
  std::vector<int> fds;
  for (int i = 0; i < 42; ++i) fds.push_back(test::connect_loopback(s.port));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto start = SteadyClock::now();
  bool closed = false;
  const std::string got = exchange(s.port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 5, &closed);
  EXPECT_TRUE(got.rfind("HTTP/1.1 503", 0) == 0 || got.rfind("HTTP/1.1 200", 0) == 0) << got;
  EXPECT_LT(seconds_since(start), 1.0) << "the reply queued behind the silent connections";
  for (const int fd : fds) ::close(fd);
  fds.clear();
  // Two silent connections fill the cap; a third starts its request over
  // the cap, and room is made for it: a silent connection gives way after
  // 200 ms, while the cap is full (one of the two, or both if they come to
  // 200 ms in the same sweep of the lobby). The third is admitted once its
  // request is whole, before its second is up, and served. (Finished after
  // its second, it would be admitted then, and cut at once if the other
  // silent connection still held the cap full: a request gets a second for
  // its line and headers while the cap is full. Sending at 1.5 s made this
  // test fail once in CI, on a busy machine.)
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  for (int i = 0; i < 2; ++i) fds.push_back(test::connect_loopback(s.port));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const int late = connect_and_send(s.port, "GET /hea");
  ASSERT_GE(late, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  const std::string rest = "lth HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::send(late, rest.data(), rest.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(rest.size()));
  const std::string answered = read_until_closed(late, 1, &closed);
  ::close(late);
  for (const int fd : fds) ::close(fd);
  EXPECT_EQ(answered.rfind("HTTP/1.1 200", 0), 0u) << answered;
}

// Over the cap, as many connections as the cap wait in the lobby for their
// requests (each keeping up to 8 KiB, counted in the memory plan); the ones
// beyond are refused as they come, and room made later admits only the
// waiting ones.
TEST(HttpServer, OverTheCapAtMostCapConnectionsWait) {
  test::LiveServer s(small_server(2, 2, 60, 60));
  std::vector<int> held, waiting, beyond;
  for (int i = 0; i < 2; ++i) held.push_back(connect_and_send(s.port, "GET /hea"));
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  for (int i = 0; i < 2; ++i) waiting.push_back(connect_and_send(s.port, "GET /hea"));
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  for (int i = 0; i < 3; ++i) beyond.push_back(connect_and_send(s.port, "GET /hea"));
  for (const int fd : held) ASSERT_GE(fd, 0);
  for (const int fd : waiting) ASSERT_GE(fd, 0);
  for (const int fd : beyond) ASSERT_GE(fd, 0);
  bool closed = false;
  for (const int fd : beyond) {
    const std::string got = read_until_closed(fd, 0.3, &closed);
    EXPECT_EQ(got.rfind("HTTP/1.1 503", 0), 0u) << "refused as it came: " << got;
    ::close(fd);
  }
  for (const int fd : waiting) {
    const std::string got = read_until_closed(fd, 0.05, &closed);
    EXPECT_TRUE(got.empty() && !closed) << "still waiting: " << got;
  }
  // Room: the two holding the cap leave; the waiting ones are admitted when
  // their requests are whole.
  for (const int fd : held) ::close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string rest = "lth HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  for (const int fd : waiting) {
    ASSERT_EQ(::send(fd, rest.data(), rest.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(rest.size()));
  }
  for (const int fd : waiting) {
    const std::string got = read_until_closed(fd, 2, &closed);
    EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
    ::close(fd);
  }
}

// A request refused for its API key leaves its body unread, so the
// connection closes after the 401: the body is not read as a request.
TEST(HttpServer, AWrongKeysBodyIsNotRunAsARequest) {
  auto o = small_server(4, 16, 5, 10);
  o.server.api_key = "secret";
  test::LiveServer s(o);
  const std::string inner = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  bool closed = false;
  const std::string got =
      exchange(s.port,
               "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: " +
                   std::to_string(inner.size()) + "\r\n\r\n" + inner,
               3, &closed);
  expect_reply(got, "401", "invalid_api_key", closed);
  EXPECT_EQ(got.find("HTTP/1.1", 5), std::string::npos) << "a second reply: " << got;
}

// Once the server stops, a request still arriving does not hold it up.
TEST(HttpServer, StopDoesNotWaitForASlowSender) {
  test::LiveServer s(small_server(4, 16, 5, 60));
  const int fd = connect_and_send(
      s.port, "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nx");
  ASSERT_GE(fd, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto start = SteadyClock::now();
  s.server->stop();
  s.thread.join();
  EXPECT_LT(seconds_since(start), 10.0) << "stop waited for the request's 60 s read timeout";
  ::close(fd);
}

}  // namespace
}  // namespace edgelm::serve
