// The gate under concurrency: first in, first out hand-off, clients that
// leave while queued, bursts decided one at a time, server cancellations
// reported as such, and a stress run with clients hanging up at random.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <nlohmann/json.hpp>
#include <random>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server_fixture.h"

namespace edgelm {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using test::chat_body;
using test::LiveServer;
using test::wait_until;

// Posts `body`, reads until `hang_up_after` SSE events have arrived (then
// closes at once) or the server closes. Returns the status line's code and
// everything read.
std::pair<int, std::string> sse_post(int port, const std::string& body, int hang_up_after = 1 << 30) {
  const int fd = test::connect_loopback(port);
  std::string got;
  if (fd < 0) return {-1, ""};
  const std::string req = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                          "Content-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  (void)!::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  timeval tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[4096];
  int events = 0;
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
    events = 0;
    for (size_t p = got.find("data: "); p != std::string::npos; p = got.find("data: ", p + 1)) ++events;
    if (events >= hang_up_after) break;
  }
  ::close(fd);
  int status = -1;
  if (got.size() > 12 && got.starts_with("HTTP/1.1 ")) status = std::atoi(got.c_str() + 9);
  return {status, got};
}

// Every "data: {...}" event's JSON.
std::vector<json> events_of(const std::string& raw) {
  std::vector<json> out;
  for (size_t p = raw.find("data: {"); p != std::string::npos; p = raw.find("data: {", p + 1)) {
    const size_t e = raw.find("\n\n", p);
    if (e == std::string::npos) break;
    json j = json::parse(raw.substr(p + 6, e - p - 6), nullptr, false);
    if (!j.is_discarded()) out.push_back(std::move(j));
  }
  return out;
}

// Waiters get the slot in the order they came, each as soon as it frees.
TEST(Gate, WaitersAreServedFirstInFirstOut) {
  LiveServer::Options o;
  o.slots = 1;
  o.step_ms = 10;
  o.server.admission.queue = 4;
  o.server.admission.queue_timeout_s = 20;
  LiveServer s(o);
  auto holder = std::async(std::launch::async, [&] {
    return s.client().Post("/v1/chat/completions", chat_body("hold", 20, false), "application/json");
  });
  ASSERT_TRUE(wait_until([&] { return s.engine->active_slots() == 1; }, 5));
  std::mutex mu;
  std::vector<int> done;
  std::vector<std::future<int>> ws;
  for (int i = 0; i < 3; ++i) {
    ws.push_back(std::async(std::launch::async, [&, i] {
      auto r = s.client().Post("/v1/chat/completions", chat_body("w", 3, false), "application/json");
      std::lock_guard<std::mutex> lk(mu);
      done.push_back(i);
      return r ? r->status : -1;
    }));
    ASSERT_TRUE(wait_until([&] { return s.server->admission().queued() == i + 1; }, 5));
  }
  EXPECT_EQ(holder.get()->status, 200);
  for (auto& w : ws) EXPECT_EQ(w.get(), 200);
  EXPECT_EQ(done, (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(s.wait_idle());
}

// A client that hangs up while queued leaves the queue within a poll
// interval, and never gets a slot or a prefill.
TEST(Gate, AClientThatLeavesTheQueueIsNeverAdmitted) {
  LiveServer::Options o;
  o.slots = 1;
  o.step_ms = 10;
  o.server.admission.queue = 2;
  o.server.admission.queue_timeout_s = 20;
  LiveServer s(o);
  // Counted before the holder is sent: when its prompt is counted (at
  // prefill) does not matter to the sum below.
  const uint64_t prompt_before = s.server->metrics().prompt_tokens.load();
  auto holder = std::async(std::launch::async, [&] {
    return s.client().Post("/v1/chat/completions", chat_body("hold", 60, false), "application/json");
  });
  ASSERT_TRUE(wait_until([&] { return s.engine->active_slots() == 1; }, 5));
  test::post_and_hang_up(s.port, "/v1/chat/completions", chat_body("gone", 50, false), 50);
  // Out of the queue while the holder still runs (60 tokens take >= 600 ms).
  EXPECT_TRUE(wait_until([&] { return s.server->admission().queued() == 0; }, 0.3))
      << "a client that hung up is still queued";
  EXPECT_EQ(s.engine->active_slots(), 1);
  const auto held = holder.get();
  ASSERT_TRUE(held);
  EXPECT_EQ(held->status, 200);
  EXPECT_TRUE(s.wait_idle());
  // Only the holder's prompt and the next one were ever submitted.
  auto r = s.client().Post("/v1/chat/completions", chat_body("later", 3, false), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const uint64_t submitted = s.server->metrics().prompt_tokens.load() - prompt_before;
  const auto prompt_of = [](const std::string& body) {
    return json::parse(body)["usage"]["prompt_tokens"].get<uint64_t>();
  };
  EXPECT_EQ(submitted, prompt_of(held->body) + prompt_of(r->body)) << "the vanished client's prompt was prefilled";
}

// Simultaneous requests are decided one after another: the throughput gate
// that admits two streams admits two of a burst of six, not four.
TEST(Gate, ABurstIsDecidedOneAtATime) {
  LiveServer::Options o;
  o.slots = 4;
  o.step_ms = 20;
  o.token_ms = 30;  // one stream 20 tokens/s, two 12.5, three 9
  o.server.admission.min_stream_rate = 10;
  LiveServer s(o);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::future<int>> fs;
  for (int i = 0; i < 6; ++i) {
    fs.push_back(std::async(std::launch::async, [&] {
      auto c = s.client();
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      auto r = c.Post("/v1/completions", R"({"prompt":"a","max_tokens":20,"ignore_eos":true})", "application/json");
      return r ? r->status : -1;
    }));
  }
  while (ready.load() < 6) std::this_thread::yield();
  go.store(true);
  int ok = 0, refused = 0;
  for (auto& f : fs) {
    const int st = f.get();
    ok += st == 200;
    refused += st == 429;
  }
  EXPECT_EQ(ok, 2);
  EXPECT_EQ(refused, 4);
  EXPECT_TRUE(s.wait_idle());
}

// A stream the server cancels (drain timeout) ends with an SSE error event
// whose code says so, never a finish_reason, and is counted as cancelled.
TEST(Gate, AServerCancellationIsAnErrorEventNotAStop) {
  LiveServer::Options o;
  o.slots = 1;
  o.step_ms = 10;
  o.server.drain_timeout_s = 0.2;
  LiveServer s(o);
  auto stream = std::async(std::launch::async, [&] { return sse_post(s.port, chat_body("long", 200, true)); });
  ASSERT_TRUE(wait_until([&] { return s.engine->active_slots() == 1; }, 5));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  s.server->drain_and_stop();
  auto [status, raw] = stream.get();
  EXPECT_EQ(status, 200);
  const auto evs = events_of(raw);
  ASSERT_FALSE(evs.empty()) << raw;
  EXPECT_TRUE(evs.back().contains("error")) << raw;
  EXPECT_EQ(evs.back()["error"]["code"], "cancelled") << raw;
  for (const json& e : evs) {
    if (e.contains("choices") && !e["choices"].empty()) {
      EXPECT_TRUE(e["choices"][0]["finish_reason"].is_null()) << raw;
    }
  }
  EXPECT_EQ(raw.find("[DONE]"), std::string::npos);
  const auto& m = s.server->metrics();
  EXPECT_EQ(m.ends[2].load(), 1u);  // "cancelled"
  EXPECT_EQ(m.by_status[8].load(), 1u);  // 503
  EXPECT_EQ(m.by_status[0].load(), 0u);  // not a 200
}

// A non-streamed answer of 200 tokens (2 s) on a one-slot server with
// `heartbeat_ms`, cancelled by the server (as a drain timeout does) `after`
// it started. Returns the response; checks that /metrics counts a 503.
httplib::Result cancel_non_streamed(int heartbeat_ms, std::chrono::milliseconds after) {
  LiveServer::Options o;
  o.slots = 1;
  o.step_ms = 10;
  o.server.heartbeat_ms = heartbeat_ms;
  LiveServer s(o);
  auto answer = std::async(std::launch::async, [&] {
    return s.client().Post("/v1/chat/completions", chat_body("long", 200, false), "application/json");
  });
  EXPECT_TRUE(wait_until([&] { return s.engine->active_slots() == 1; }, 5));
  std::this_thread::sleep_for(after);
  s.engine->cancel_all();
  httplib::Result res = answer.get();
  const auto& m = s.server->metrics();
  // Counted once the response is done (after the client has it).
  EXPECT_TRUE(wait_until([&] { return m.ends[2].load() == 1; }, 5));  // "cancelled"
  EXPECT_EQ(m.by_status[8].load(), 1u);  // 503
  EXPECT_EQ(m.by_status[0].load(), 0u);  // not a 200
  // And an answer that is done within the first interval is an ordinary 200.
  const auto ok = s.client().Post("/v1/chat/completions", chat_body("short", 3, false), "application/json");
  EXPECT_TRUE(ok && ok->status == 200 && json::parse(ok->body)["choices"][0]["finish_reason"] == "length");
  EXPECT_TRUE(wait_until([&] { return m.by_status[0].load() == 1; }, 5));
  return res;
}

// The body is OpenAI's error object and nothing else.
void expect_cancelled_error(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << body;
  ASSERT_TRUE(j.contains("error")) << body;
  EXPECT_EQ(j.size(), 1u) << body;
  EXPECT_EQ(j["error"]["code"], "cancelled") << body;
  EXPECT_EQ(j["error"]["type"], "server_error") << body;
  EXPECT_TRUE(j["error"]["message"].is_string()) << body;
}

// Cancelled after its heartbeats have gone out: the status line (200) is
// out, so the body says what happened, behind the heartbeats.
TEST(Gate, ANonStreamedAnswerCancelledAfterItsHeartbeatsIsAnErrorBody) {
  const auto res = cancel_non_streamed(50, std::chrono::milliseconds(400));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << "sent before the failure";
  EXPECT_GT(res->body.find_first_not_of(' '), 0u) << "heartbeats came first: " << res->body;
  expect_cancelled_error(res->body);
}

// Cancelled before its first heartbeat was due: nothing had been sent, so
// it gets its real status code.
TEST(Gate, ANonStreamedAnswerThatFailsEarlyGetsItsStatusCode) {
  const auto res = cancel_non_streamed(2000, std::chrono::milliseconds(100));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503) << res->body;
  expect_cancelled_error(res->body);
}

// Many streams on few slots; clients retry on 429; half of them hang up at
// a random point, right after the last token included. Every client that
// stays gets exactly its max_tokens and "length", no slot leaks, and the
// server keeps serving.
TEST(Gate, StressWithClientsHangingUpLeaksNothing) {
  LiveServer::Options o;
  o.slots = 2;
  o.step_ms = 2;
  o.server.admission.queue = 2;
  o.server.admission.queue_timeout_s = 10;
  LiveServer s(o);
  constexpr int kClients = 10, kEach = 5, kTokens = 12;
  std::atomic<int> completed{0}, hung_up{0}, wrong{0};
  std::vector<std::thread> ts;
  for (int c = 0; c < kClients; ++c) {
    ts.emplace_back([&, c] {
      std::mt19937 rng(static_cast<uint32_t>(c) * 7919u + 1);
      const bool quitter = c % 2 == 1;
      for (int i = 0; i < kEach; ++i) {
        // Events: one per token (+ the first's role chunk may carry it), the
        // finish chunk, the usage chunk, [DONE]. A quitter stops after k of them.
        const int k = quitter ? std::uniform_int_distribution<int>(1, kTokens + 2)(rng) : 1 << 30;
        const std::string body = chat_body("stress", kTokens, true, R"("stream_options":{"include_usage":true})");
        for (int attempt = 0; attempt < 200; ++attempt) {
          auto [status, raw] = sse_post(s.port, body, k);
          if (status == 429) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            continue;
          }
          if (quitter && raw.find("[DONE]") == std::string::npos) {
            hung_up.fetch_add(1);
            break;
          }
          const auto evs = events_of(raw);
          std::string finish;
          int usage = -1;
          for (const json& e : evs) {
            if (e.contains("choices") && !e["choices"].empty() && e["choices"][0]["finish_reason"].is_string())
              finish = e["choices"][0]["finish_reason"];
            if (e.contains("usage") && e["usage"].is_object()) usage = e["usage"]["completion_tokens"];
          }
          if (status != 200 || finish != "length" || usage != kTokens || raw.find("[DONE]") == std::string::npos) {
            wrong.fetch_add(1);
            ADD_FAILURE() << "status " << status << " finish '" << finish << "' tokens " << usage << "\n" << raw;
          }
          completed.fetch_add(1);
          break;
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GE(completed.load(), kClients / 2 * kEach);
  EXPECT_GT(hung_up.load(), 0);
  EXPECT_TRUE(s.wait_idle(5)) << "a slot leaked";
  EXPECT_EQ(s.server->admission().queued(), 0);
  auto r = s.client().Post("/v1/chat/completions", chat_body("after", 3, false), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

}  // namespace
}  // namespace edgelm
