// The runner against a tiny in-test server that answers like an OpenAI
// server with a fixed number of slots: canned SSE at a known pace for the
// admitted, 429 with Retry-After for the rest. No engine needed.
#include "loadgen/load.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "loadgen/plot.h"
#include "loadgen/report.h"
#include "testutil.h"

namespace edgelm::loadgen {
namespace {

using namespace std::chrono_literals;

struct FakeOptions {
  int slots = 2;
  int tokens = 8;
  std::chrono::milliseconds prefill = 40ms;  // before the first token
  std::chrono::milliseconds gap = 10ms;      // between tokens
  bool report_usage = true;
};

// A stand-in for an OpenAI server with `slots` slots.
class FakeServer {
 public:
  explicit FakeServer(FakeOptions o) : o_(o) {
    srv_.new_task_queue = [] { return new httplib::ThreadPool(32); };
    srv_.set_tcp_nodelay(true);
    srv_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{\"status\":\"ok\"}", "application/json");
    });
    srv_.Post("/v1/completions",
              [this](const httplib::Request& req, httplib::Response& res) { generate(req, res); });
    srv_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard<std::mutex> lk(mu_);
        bodies_.push_back(req.body);
      }
      generate(req, res, true);
    });
    // Sends two tokens, then drops the connection without ending the stream.
    srv_.Post("/broken/v1/completions", [](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("text/event-stream", [](size_t, httplib::DataSink& sink) {
        const std::string ev = "data: {\"choices\":[{\"text\":\"x\"}]}\n\n";
        sink.write(ev.data(), ev.size());
        sink.write(ev.data(), ev.size());
        return false;  // abort: httplib closes the socket
      });
    });
    port_ = srv_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { srv_.listen_after_bind(); });
    // stop() is a no-op until the accept loop runs: wait for it.
    while (!srv_.is_running()) std::this_thread::sleep_for(1ms);
  }
  ~FakeServer() {
    srv_.stop();
    thread_.join();
  }
  std::string url(const std::string& prefix = "") const {
    return "http://127.0.0.1:" + std::to_string(port_) + prefix;
  }
  int max_active() const { return max_active_.load(); }
  // The bodies of the chat requests, in arrival order.
  std::vector<std::string> chat_bodies() {
    std::lock_guard<std::mutex> lk(mu_);
    return bodies_;
  }

 private:
  void generate(const httplib::Request& req, httplib::Response& res, bool chat = false) {
    const bool stream = req.body.find("\"stream\":true") != std::string::npos;
    const int now = active_.fetch_add(1) + 1;
    if (now > o_.slots) {
      active_.fetch_sub(1);
      res.status = 429;
      res.set_header("Retry-After", "2");
      res.set_content(
          R"({"error":{"message":"all slots are busy","type":"rate_limit_exceeded","code":"slots"}})",
          "application/json");
      return;
    }
    int seen = max_active_.load();
    while (seen < now && !max_active_.compare_exchange_weak(seen, now)) {
    }
    // Its prediction of the first token, as edgelm sends one.
    res.set_header("X-Edgelm-Predicted-Ttft-Ms", std::to_string(o_.prefill.count()));
    const FakeOptions o = o_;
    // The slot is given back before the last bytes go out, as a real server
    // frees it when generation ends: a client that sends its next request the
    // moment it has read the answer must find it free. A stream that breaks
    // off gives it back in the releaser instead.
    auto held = std::make_shared<std::atomic<bool>>(true);
    auto release = [this, held] {
      if (held->exchange(false)) active_.fetch_sub(1);
    };
    auto provider = [o, stream, chat, release](size_t, httplib::DataSink& sink) {
      auto put = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
      std::this_thread::sleep_for(o.prefill);
      std::string text;
      for (int i = 0; i < o.tokens; ++i) {
        if (i > 0) std::this_thread::sleep_for(o.gap);
        if (stream) {
          // A keep-alive comment now and then, as edgelm sends while idle.
          if (i == 1 && !put(": keep-alive\n\n")) return false;
          if (!put(chat ? "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok \"}}]}\n\n"
                        : "data: {\"choices\":[{\"index\":0,\"text\":\"tok \",\"finish_reason\":null}]}\n\n"))
            return false;
        } else {
          text += "tok ";
          if (!put(" ")) return false;  // whitespace heartbeat, as edgelm sends
        }
      }
      const std::string usage =
          ",\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":" + std::to_string(o.tokens) + "}";
      release();
      if (stream) {
        put(std::string(
            "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}]}\n\n"));
        if (o.report_usage) put("data: {\"choices\":[]" + usage + "}\n\n");
        put("data: [DONE]\n\n");
      } else {
        put("{\"choices\":[{\"index\":0,\"text\":\"" + text + "\",\"finish_reason\":\"length\"}]" +
            (o.report_usage ? usage : std::string()) + "}");
      }
      sink.done();
      return true;
    };
    res.set_chunked_content_provider(stream ? "text/event-stream" : "application/json", provider,
                                     [release](bool) { release(); });
  }

  FakeOptions o_;
  httplib::Server srv_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<int> active_{0};
  std::atomic<int> max_active_{0};
  std::mutex mu_;
  std::vector<std::string> bodies_;
};

size_t count_status(const LoadResult& r, int status) {
  size_t n = 0;
  for (const auto& x : r.records) n += x.status == status && !x.transport_error();
  return n;
}

TEST(ParseUrl, Forms) {
  auto t = parse_url("http://127.0.0.1:8080");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->host, "127.0.0.1");
  EXPECT_EQ(t->port, 8080);
  EXPECT_EQ(t->base, "");
  t = parse_url("localhost:9000/v1/");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->host, "localhost");
  EXPECT_EQ(t->base, "");
  t = parse_url("http://[::1]:81/proxy");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->host, "::1");
  EXPECT_EQ(t->port, 81);
  EXPECT_EQ(t->base, "/proxy");
  EXPECT_EQ(parse_url("http://host").value().port, 80);
  EXPECT_FALSE(parse_url("https://host").ok());
  EXPECT_FALSE(parse_url("http://host:0").ok());
  EXPECT_FALSE(parse_url("http://host:80x").ok());
  EXPECT_FALSE(parse_url("http://:80").ok());
}

TEST(Load, ClosedLoopCountsAndTimings) {
  FakeServer srv({.slots = 2, .tokens = 8, .prefill = 40ms, .gap = 10ms});
  LoadOptions o;
  o.url = srv.url();
  o.clients = 4;
  o.duration_s = 1.0;
  o.stream = true;
  o.prompt_tokens = 16;
  o.max_tokens = 8;
  o.timeout_s = 10;
  auto r = run_load(o);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_FALSE(r->open_loop);
  const size_t ok = count_status(*r, 200), busy = count_status(*r, 429);
  // Two slots, ~110 ms a request: about 18 answers in a second; the other two
  // clients get 429s back to back.
  EXPECT_GE(ok, 8u);
  EXPECT_LE(ok, 24u);
  EXPECT_GT(busy, 0u);
  EXPECT_EQ(ok + busy, r->records.size());
  EXPECT_LE(srv.max_active(), 2);
  for (const auto& x : r->records) {
    EXPECT_TRUE(x.transport.empty()) << x.transport;
    if (x.status == 200) {
      EXPECT_TRUE(x.ok()) << x.error;
      EXPECT_EQ(x.tokens, 8);
      EXPECT_EQ(x.chunks, 8);
      EXPECT_EQ(x.keepalives, 1u);
      // Only what the server's sleeps guarantee: the client's clock starts
      // before the request leaves, so the first token is at least `prefill`
      // away and the last at least prefill + 7 gaps. How the 7 gaps split
      // between chunks depends on when the client thread runs (a late first
      // chunk makes the rest look bunched), so single gaps are not bounded.
      EXPECT_GE(x.ttft_s, 0.039);
      EXPECT_LT(x.ttft_s, 1.0);  // generous: the test machine may be busy
      EXPECT_DOUBLE_EQ(x.predicted_ttft_s, 0.040);
      EXPECT_GE(x.latency_s, 0.040 + 7 * 0.010 - 1e-3);
      EXPECT_LT(x.tpot_s, 0.1);
      ASSERT_EQ(x.gaps_s.size(), 7u);
      double sum = 0;
      for (float g : x.gaps_s) sum += g;
      EXPECT_NEAR(sum, x.tpot_s * 7, 1e-4);
      EXPECT_LE(x.ttft_s + sum, x.latency_s + 1e-4);
      EXPECT_FLOAT_EQ(*std::max_element(x.gaps_s.begin(), x.gaps_s.end()),
                      static_cast<float>(x.max_gap_s));
    } else {
      EXPECT_EQ(x.error, "slots");
      EXPECT_DOUBLE_EQ(x.retry_after_s, 2);
      EXPECT_TRUE(std::isnan(x.ttft_s));
      EXPECT_LT(x.latency_s, 0.5);
    }
  }
  const auto j = report_json(*r);
  EXPECT_EQ(j["requests"]["by_status"]["200"].get<size_t>(), ok);
  EXPECT_EQ(j["requests"]["by_status"]["429"].get<size_t>(), busy);
  EXPECT_EQ(j["requests"]["error_codes"]["slots"].get<size_t>(), busy);
  EXPECT_EQ(j["requests"]["transport_errors"]["total"].get<size_t>(), 0u);
  // The stream's tokens span prefill + 7 gaps of 10 ms; the gaps the client
  // saw add up to what is left after the first token, less the short wait
  // for the finish, usage and [DONE] events that follow the last token.
  std::vector<double> tail;
  for (const auto& x : r->records)
    if (x.status == 200) tail.push_back(x.latency_s - x.ttft_s - x.tpot_s * 7);
  ASSERT_FALSE(tail.empty());
  std::nth_element(tail.begin(), tail.begin() + static_cast<std::ptrdiff_t>(tail.size() / 2), tail.end());
  EXPECT_LT(tail[tail.size() / 2], 0.02);
  EXPECT_LT(j["ok"]["tpot_ms"]["p50"].get<double>(), 100.0);
  EXPECT_GE(j["ok"]["ttft_ms"]["p99"].get<double>(), 35.0);
  EXPECT_EQ(j["ok"]["itl_ms"]["count"].get<size_t>(), ok * 7);
  EXPECT_GE(j["client_cpu_s"].get<double>(), 0.0);
  EXPECT_EQ(j["ok"]["tokens"].get<size_t>(), ok * 8);
  EXPECT_GT(j["throughput"]["tokens_per_s"].get<double>(), 40.0);
  EXPECT_EQ(j["status_429"]["count"].get<size_t>(), busy);
  EXPECT_TRUE(j["rss"].is_null());
  // Measured against the server's prediction: never much less (the client
  // waits at least the 40 ms the server sleeps).
  EXPECT_EQ(j["ok"]["ttft_vs_predicted"]["ratio"]["count"].get<size_t>(), ok);
  EXPECT_GE(j["ok"]["ttft_vs_predicted"]["ratio"]["min"].get<double>(), 0.97);
  const std::string text = format_report(j);
  EXPECT_NE(text.find("429="), std::string::npos);
  EXPECT_NE(text.find("measured / the server's prediction"), std::string::npos);
  // One CSV row a request, plus the header.
  const std::string csv = records_csv(*r);
  EXPECT_EQ(static_cast<size_t>(std::count(csv.begin(), csv.end(), '\n')), r->records.size() + 1);
}

// A 429's latency counts from its scheduled arrival; "from send" takes
// away the load generator's own lag behind that schedule, which a client on
// another machine would not add.
TEST(Load, RefusalLatencyFromSendLeavesOutTheGeneratorsLag) {
  LoadResult r;
  r.wall_s = 1;
  for (int i = 0; i < 4; ++i) {
    RequestRecord x;
    x.index = static_cast<uint64_t>(i);
    x.status = 429;
    x.error = "slots";
    x.lag_s = i == 3 ? 0.030 : 0.0;
    x.latency_s = 0.002 + x.lag_s;
    r.records.push_back(x);
  }
  const auto j = report_json(r);
  EXPECT_NEAR(j["status_429"]["latency_ms"]["max"].get<double>(), 32.0, 1e-6);
  EXPECT_NEAR(j["status_429"]["latency_from_send_ms"]["max"].get<double>(), 2.0, 1e-6);
  EXPECT_NE(format_report(j).find("from send"), std::string::npos);
  EXPECT_NE(records_csv(r).find(",lag_ms\n"), std::string::npos);
}

TEST(Load, OpenLoopPoissonWithACap) {
  FakeServer srv({.slots = 2, .tokens = 4, .prefill = 20ms, .gap = 10ms});
  LoadOptions o;
  o.url = srv.url();
  o.rate = 60;
  o.clients = 3;  // at most 3 in flight
  o.duration_s = 1.0;
  o.stream = true;
  o.seed = 7;
  auto r = run_load(o);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_TRUE(r->open_loop);
  EXPECT_EQ(r->concurrency, 3);
  const double arrivals = static_cast<double>(r->records.size() + r->client_dropped);
  EXPECT_GT(arrivals, 30);  // Poisson(60): far outside 30..95 is a bug
  EXPECT_LT(arrivals, 95);
  EXPECT_GT(count_status(*r, 200), 5u);
  EXPECT_EQ(count_status(*r, 200) + count_status(*r, 429), r->records.size());
  for (const auto& x : r->records) {
    EXPECT_TRUE(x.transport.empty()) << x.transport;
    EXPECT_LT(x.lag_s, 0.2);
  }
  // The same seed gives the same arrival times.
  auto r2 = run_load(o);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->records.size() + r2->client_dropped, r->records.size() + r->client_dropped);
}

TEST(Load, OpenLoopDropsBeyondTheCap) {
  // One slot, requests of ~0.3 s, 40/s offered, one in flight: most arrivals
  // find the only worker busy and are counted as drops, not queued.
  FakeServer srv({.slots = 1, .tokens = 2, .prefill = 300ms, .gap = 1ms});
  LoadOptions o;
  o.url = srv.url();
  o.rate = 40;
  o.clients = 1;
  o.duration_s = 1.0;
  o.stream = true;
  auto r = run_load(o);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_LE(r->records.size(), 5u);
  EXPECT_GT(r->client_dropped, 15u);
}

// --turns: each chat sends its history back, the answers as they came, and
// the report gives time to first token per turn.
TEST(Load, ConversationsSendTheHistoryBack) {
  FakeServer srv({.slots = 1, .tokens = 3, .prefill = 5ms, .gap = 2ms});
  LoadOptions o;
  o.url = srv.url();
  o.clients = 1;
  o.chat = true;
  o.stream = true;
  o.turns = 3;
  o.system_tokens = 6;
  o.prompt_tokens = 4;
  o.duration_s = 0.4;
  auto r = run_load(o);
  ASSERT_TRUE(r.ok()) << r.message();
  const std::vector<std::string> bodies = srv.chat_bodies();
  ASSERT_GE(bodies.size(), 4u) << "at least one whole chat and the start of the next";
  std::string system;
  for (size_t i = 0; i < bodies.size(); ++i) {
    const nlohmann::json msgs = nlohmann::json::parse(bodies[i])["messages"];
    const size_t turn = i % 3;  // 0-based turn of this request within its chat
    ASSERT_EQ(msgs.size(), 2 + 2 * turn) << bodies[i];
    EXPECT_EQ(msgs[0]["role"], "system");
    if (i == 0) system = msgs[0]["content"];
    EXPECT_EQ(msgs[0]["content"], system) << "every chat opens with the same system message";
    for (size_t k = 0; k < turn; ++k) {
      EXPECT_EQ(msgs[1 + 2 * k]["role"], "user");
      EXPECT_EQ(msgs[2 + 2 * k]["role"], "assistant");
      EXPECT_EQ(msgs[2 + 2 * k]["content"], "tok tok tok ");  // the streamed answer, sent back
      // The earlier user messages are the ones sent before.
      EXPECT_EQ(msgs[1 + 2 * k]["content"],
                nlohmann::json::parse(bodies[i - turn + k])["messages"].back()["content"]);
    }
  }
  EXPECT_EQ(std::count(system.begin(), system.end(), ' '), 5);
  const nlohmann::json rep = report_json(*r);
  ASSERT_EQ(rep["turns"].size(), 3u);
  EXPECT_GE(rep["turns"][0]["ttft_ms"]["count"].get<size_t>(), 1u);
  EXPECT_NE(format_report(rep).find("TTFT turn 3"), std::string::npos);
  // Conversations need chat and a closed loop.
  o.chat = false;
  EXPECT_FALSE(run_load(o).ok());
}

// A chat client that gets a 429 waits for its Retry-After (the fake server
// says 2 s, longer than the run) and then sends the same turn again: a
// refused client does not hammer the server, and its chat is not lost.
TEST(Load, ConversationsWaitOutA429) {
  FakeServer srv({.slots = 1, .tokens = 3, .prefill = 20ms, .gap = 5ms});
  LoadOptions o;
  o.url = srv.url();
  o.clients = 3;
  o.chat = true;
  o.stream = true;
  o.turns = 3;
  o.prompt_tokens = 4;
  o.duration_s = 0.5;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_load(o);
  ASSERT_TRUE(r.ok()) << r.message();
  const nlohmann::json rep = report_json(*r);
  const int refused = rep["status_429"]["count"].get<int>();
  EXPECT_GE(refused, 1) << "three clients on one slot";
  // Each refused client waits out the run (Retry-After 2 s > 0.5 s): at most
  // one 429 per client, where an immediate retry would send hundreds.
  EXPECT_LE(refused, 3);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms) << "the wait ends with the run";
}

TEST(Load, NonStreamedCountsUsageTokens) {
  FakeServer srv({.slots = 1, .tokens = 5, .prefill = 10ms, .gap = 5ms});
  LoadOptions o;
  o.url = srv.url();
  o.clients = 1;
  o.duration_s = 0.3;
  auto r = run_load(o);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_FALSE(r->records.empty());
  for (const auto& x : r->records) {
    EXPECT_TRUE(x.ok()) << x.status << " " << x.error << " " << x.transport;
    EXPECT_EQ(x.tokens, 5);
    EXPECT_TRUE(std::isnan(x.ttft_s));
    EXPECT_GE(x.latency_s, 0.03);
  }
}

TEST(Load, WithoutUsageTokensAreContentChunks) {
  FakeServer srv({.slots = 1, .tokens = 6, .prefill = 5ms, .gap = 5ms, .report_usage = false});
  LoadOptions o;
  o.url = srv.url();
  o.clients = 1;
  o.duration_s = 0.2;
  o.stream = true;
  auto r = run_load(o);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_FALSE(r->records.empty());
  EXPECT_EQ(r->records[0].tokens, 6);
  EXPECT_EQ(r->records[0].chunks, 6);
}

TEST(Load, BrokenStreamIsATransportError) {
  FakeServer srv({});
  LoadOptions o;
  o.url = srv.url("/broken");
  o.clients = 1;
  o.duration_s = 0.2;
  o.stream = true;
  auto r = run_load(o);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_FALSE(r->records.empty());
  for (const auto& x : r->records) {
    EXPECT_FALSE(x.ok());
    EXPECT_TRUE(x.transport == "read" || x.transport == "incomplete") << x.transport;
    EXPECT_EQ(x.status, 200);
    EXPECT_EQ(x.chunks, 2);
  }
  const auto j = report_json(*r);
  EXPECT_EQ(j["requests"]["transport_errors"]["total"].get<size_t>(), r->records.size());
  EXPECT_EQ(j["ok"]["count"].get<size_t>(), 0u);
}

TEST(Load, SlowAnswerTimesOut) {
  FakeServer srv({.slots = 1, .tokens = 2, .prefill = 1500ms, .gap = 1ms});
  LoadOptions o;
  o.url = srv.url();
  o.clients = 1;
  o.duration_s = 0.1;
  o.stream = true;
  o.timeout_s = 0.3;
  auto r = run_load(o);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->records.size(), 1u);
  EXPECT_FALSE(r->records[0].transport.empty());
  EXPECT_LT(r->records[0].latency_s, 1.2);
}

TEST(Load, UnreachableServerFailsBeforeStarting) {
  // A port that was free a moment ago: bound, read back, closed.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int port = ntohs(a.sin_port);
  ::close(fd);
  LoadOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(port);
  auto r = run_load(o);
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(run_load({.url = "ftp://x"}).ok());
}

TEST(Load, SamplesResidentMemoryAndPlots) {
  FakeServer srv({.slots = 2, .tokens = 4, .prefill = 10ms, .gap = 10ms});
  LoadOptions o;
  o.url = srv.url();
  o.clients = 2;
  o.duration_s = 0.6;
  o.stream = true;
  o.pid = static_cast<int>(::getpid());  // the server runs in this process
  auto r = run_load(o);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_GE(r->rss.size(), 4u);
  EXPECT_LT(r->server_exited_at_s, 0);
  for (const auto& s : r->rss) EXPECT_GT(s.rss, 1u << 20);
  const auto j = report_json(*r);
  EXPECT_GT(j["rss"]["peak_bytes"].get<double>(), 0);
  EXPECT_GE(j["rss"]["peak_bytes"].get<double>(), j["rss"]["steady_bytes"].get<double>());
  EXPECT_TRUE(j["rss"]["after_warmup"].is_object());
  EXPECT_EQ(j["rss"]["series_t_rss_anon_file"].size(), r->rss.size());

  const std::string png = test::temp_path("load-plot.png");
  const std::string script = plot_script(*r, png);
  EXPECT_NE(script.find("$rss << EOD"), std::string::npos);
  EXPECT_NE(script.find("$ok << EOD"), std::string::npos);
  if (find_gnuplot().empty()) GTEST_SKIP() << "gnuplot not installed; plot not drawn";
  ASSERT_TRUE(write_plot(*r, png).ok());
  std::ifstream in(png, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
}

TEST(Load, RssSamplerNoticesAnExit) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::usleep(300000);
    ::_exit(0);
  }
  ASSERT_TRUE(RssSampler::check_pid(child).ok());
  RssSampler s(child, std::chrono::steady_clock::now(), std::chrono::milliseconds(20));
  // Reap it, so /proc/PID goes away, then give the sampler time to see.
  int st = 0;
  ::waitpid(child, &st, 0);
  std::this_thread::sleep_for(100ms);
  const auto samples = s.stop();
  EXPECT_FALSE(samples.empty());
  EXPECT_GT(s.exited_at_s(), 0.2);
}

TEST(Load, ParseProcStatus) {
  auto s = parse_proc_status(
      "Name:\tedgelm\nVmPeak:\t 999 kB\nVmRSS:\t    2048 kB\nRssAnon:\t  1024 kB\nRssFile:\t 512 "
      "kB\n");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->rss, 2048u * 1024);
  EXPECT_EQ(s->anon, 1024u * 1024);
  EXPECT_EQ(s->file, 512u * 1024);
  EXPECT_FALSE(parse_proc_status("Name:\tkthreadd\nState:\tS\n").has_value());
}

}  // namespace
}  // namespace edgelm::loadgen
