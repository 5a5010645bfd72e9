// The status page's parts: the ring of per-second samples, GET /status's
// JSON, GET / and the API key.
#include "serve/status.h"

#include <gtest/gtest.h>

#include <future>
#include <nlohmann/json.hpp>

#include "alloc_counter.h"
#include "serve/status_ring.h"
#include "server_fixture.h"

namespace edgelm {
namespace {

using json = nlohmann::json;
using serve::Histogram;
using serve::Reason;
using serve::StatusCounters;
using serve::StatusRing;
using serve::StatusSample;
using test::chat_body;
using test::LiveServer;

constexpr size_t idx(Reason r) {
  return static_cast<size_t>(r);
}

TEST(StatusRing, QuantileInterpolatesInsideItsBucket) {
  Histogram::Counts c{};
  EXPECT_LT(serve::histogram_quantile(c, 0.5), 0) << "no observations: no figure";
  c[0] = 10;  // all ten in (0, 5 ms]
  EXPECT_NEAR(serve::histogram_quantile(c, 0.5), 0.0025, 1e-6);
  c[0] = 0;
  c[8] = 4;  // (0.5, 1] s
  c[9] = 4;  // (1, 2.5] s
  EXPECT_NEAR(serve::histogram_quantile(c, 0.5), 1.0, 1e-6);
  EXPECT_NEAR(serve::histogram_quantile(c, 0.75), 1.75, 1e-6);
  c = {};
  c[Histogram::kBuckets] = 3;  // beyond the last bound: the last bound
  EXPECT_NEAR(serve::histogram_quantile(c, 0.99), Histogram::kBounds.back(), 1e-6);
}

TEST(StatusRing, KeepsTheNewestSecondsInAFixedRing) {
  StatusRing ring(5);
  EXPECT_EQ(ring.capacity(), 5);
  StatusCounters c;
  for (int t = 1; t <= 8; ++t) {  // the first record is the baseline
    c.generated = static_cast<uint64_t>(t * t);
    ring.record(t, 1.0, c);
  }
  EXPECT_EQ(ring.capacity(), 5);
  EXPECT_EQ(ring.size(), 5);
  std::vector<int64_t> ts;
  std::vector<float> rates;
  ring.for_each([&](const StatusSample& s) {
    ts.push_back(s.t);
    rates.push_back(s.tokens_per_s);
  });
  EXPECT_EQ(ts, (std::vector<int64_t>{4, 5, 6, 7, 8}));      // oldest first
  EXPECT_EQ(rates, (std::vector<float>{7, 9, 11, 13, 15}));  // t^2 - (t-1)^2
}

TEST(StatusRing, CountsAdmissionsAndRefusalsPerSecondAndWindowsPercentiles) {
  StatusRing ring(300);
  StatusCounters c;
  ring.record(100, 1.0, c);
  c.admitted = 3;
  c.refused[idx(Reason::Slots)] = 2;
  c.refused[idx(Reason::Ttft)] = 1;
  c.generated = 40;
  c.ttft[6] = 3;  // three first tokens in (0.1, 0.25] s
  c.busy = 2;
  ring.record(101, 2.0, c);  // two seconds passed: rates halve, counts do not
  c.admitted = 4;
  ring.record(102, 1.0, c);
  std::vector<StatusSample> got;
  ring.for_each([&](const StatusSample& s) { got.push_back(s); });
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].admitted, 3u);
  EXPECT_EQ(got[0].refused[idx(Reason::Slots)], 2u);
  EXPECT_EQ(got[0].refused[idx(Reason::Ttft)], 1u);
  EXPECT_FLOAT_EQ(got[0].tokens_per_s, 20);
  EXPECT_EQ(got[0].busy, 2);
  EXPECT_EQ(got[1].admitted, 1u);
  EXPECT_EQ(got[1].refused[idx(Reason::Slots)], 0u);
  EXPECT_FLOAT_EQ(got[1].tokens_per_s, 0);
  // The percentiles look back over the window, so the second after still has them.
  EXPECT_GT(got[1].ttft[0], 0.1f);
  EXPECT_LE(got[1].ttft[2], 0.25f);
  EXPECT_LT(got[1].tpot[0], 0) << "no per-token times yet";
  // Once the window has passed without new first tokens, they are gone.
  for (int t = 103; t < 103 + StatusRing::kWindow; ++t) ring.record(t, 1.0, c);
  float last = 0;
  ring.for_each([&](const StatusSample& s) { last = s.ttft[0]; });
  EXPECT_LT(last, 0);
}

TEST(StatusRing, RecordingAllocatesNothing) {
  StatusRing ring(300);
  StatusCounters c;
  const uint64_t before = test::allocations();
  for (int t = 0; t < 1000; ++t) {  // wraps the ring three times
    c.generated += 10;
    c.ttft[static_cast<size_t>(t % 15)] += 1;
    ring.record(t, 1.0, c);
  }
  EXPECT_EQ(test::allocations(), before);
  EXPECT_EQ(ring.size(), 300);
}

TEST(StatusRing, IsCountedWithTheServerBuffers) {
  serve::ServerOptions a, b;
  a.status_seconds = 300;
  b.status_seconds = 600;
  EXPECT_EQ(serve::server_buffer_bytes(b, 4) - serve::server_buffer_bytes(a, 4),
            300 * sizeof(StatusSample));
  EXPECT_GE(serve::server_buffer_bytes(a, 4), StatusRing::bytes(300));
}

json get_json(httplib::Client& c, const char* path, int want = 200) {
  auto r = c.Get(path);
  EXPECT_TRUE(r);
  if (!r) return {};
  EXPECT_EQ(r->status, want) << path << ": " << r->body;
  return json::parse(r->body, nullptr, false);
}

TEST(Status, JsonHasThePlanTheSlotsAndTheHistory) {
  LiveServer::Options o;
  o.slots = 2;
  o.step_ms = 20;  // 200 tokens take 4 s: the streams below overlap
  LiveServer s(o);
  auto c = s.client();
  // Fill both slots, then a third request is refused for want of a slot.
  std::vector<std::future<int>> streams;
  for (int i = 0; i < 2; ++i)
    streams.push_back(std::async(std::launch::async, [&] {
      auto r =
          s.client().Post("/v1/chat/completions", chat_body("go", 200, true), "application/json");
      return r ? r->status : -1;
    }));
  ASSERT_TRUE(test::wait_until([&] { return s.engine->active_slots() == 2; }, 5));
  auto refused = c.Post("/v1/chat/completions", chat_body("three", 5, false), "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 429);

  json j;
  // The sampler records once a second: wait for the refusal to land in the ring.
  ASSERT_TRUE(test::wait_until(
      [&] {
        j = get_json(c, "/status");
        for (const auto& v : j["history"]["refused"]["slots"])
          if (v.get<int>() > 0) return true;
        return false;
      },
      5))
      << j.dump();
  EXPECT_FALSE(j["version"].get<std::string>().empty());
  EXPECT_GE(j["uptime_s"].get<double>(), 0);
  EXPECT_FALSE(j["model"]["id"].get<std::string>().empty());
  EXPECT_EQ(j["flags"]["slots"], 2);
  EXPECT_EQ(j["flags"]["ctx"], s.engine->ctx());
  EXPECT_EQ(j["flags"]["api_key"], false);

  // The plan's parts are /metrics' reserved bytes (the pinned prefix 0
  // here, see below), and they sum to its total.
  const MemoryPlan& p = s.engine->plan();
  uint64_t sum = 0;
  std::vector<std::string> kinds;
  for (const auto& part : j["memory"]["plan"]["parts"]) {
    sum += part["bytes"].get<uint64_t>();
    kinds.push_back(part["kind"]);
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"weights", "kv", "scratch", "pinned_prefix", "other",
                                             "process"}));
  EXPECT_EQ(sum, p.total);
  EXPECT_EQ(j["memory"]["plan"]["total"].get<uint64_t>(), p.total);
  EXPECT_EQ(j["memory"]["budget"]["bytes"].get<uint64_t>(), p.budget.bytes);
  EXPECT_GT(j["memory"]["resident"].get<uint64_t>(), 0u);
  EXPECT_TRUE(j["memory"]["cgroup"].contains("usage"));

  ASSERT_EQ(j["slots"].size(), 2u);
  for (const auto& sl : j["slots"]) {
    for (const char* k : {"id", "state", "ctx", "cached_tokens", "tokens_per_s"})
      EXPECT_TRUE(sl.contains(k)) << k;
  }
  EXPECT_GE(j["totals"]["refused"]["slots"].get<int>(), 1);
  EXPECT_GE(j["totals"]["admitted"].get<int>(), 2);
  ASSERT_EQ(j["totals"]["classes"].size(), 1u);
  EXPECT_EQ(j["totals"]["classes"][0]["class"], "chat");
  EXPECT_GE(j["totals"]["classes"][0]["refused"].get<int>(), 1);

  const json& h = j["history"];
  EXPECT_EQ(h["capacity_s"], 300);
  const size_t n = h["t"].size();
  EXPECT_GE(n, 1u);
  for (const char* col : {"tokens_per_s", "prompt_per_s", "busy", "queued", "admitted"})
    EXPECT_EQ(h[col].size(), n) << col;
  for (const char* r :
       {"slots", "throughput", "ttft", "memory_pressure", "draining", "prompt_too_long"})
    EXPECT_EQ(h["refused"][r].size(), n) << r;
  for (const char* q : {"p50", "p90", "p99"}) {
    EXPECT_EQ(h["ttft"][q].size(), n);
    EXPECT_EQ(h["tpot"][q].size(), n);
  }

  // While the streams run, a running slot shows its tokens and its rate.
  ASSERT_TRUE(test::wait_until(
      [&] {
        j = get_json(c, "/slots");
        for (const auto& sl : j)
          if (sl["state"] == "decode" && sl["generated_tokens"].get<int>() > 0 &&
              sl["tokens_per_s"].get<double>() > 0)
            return true;
        return false;
      },
      3))
      << j.dump();
  for (auto& f : streams) EXPECT_EQ(f.get(), 200);
}

// A pinned system prompt is a part of the plan of its own.
TEST(Status, ThePinnedPrefixIsAPartOfThePlan) {
  LiveServer::Options o;
  o.slots = 2;
  o.system_prompt = "you are the status page's test";
  LiveServer s(o);
  auto c = s.client();
  const json j = get_json(c, "/status");
  const MemoryPlan& p = s.engine->plan();
  ASSERT_GT(p.pinned, 0u);
  uint64_t sum = 0, pinned = 0;
  for (const auto& part : j["memory"]["plan"]["parts"]) {
    sum += part["bytes"].get<uint64_t>();
    if (part["kind"] == "pinned_prefix") pinned = part["bytes"].get<uint64_t>();
  }
  EXPECT_EQ(pinned, p.pinned);
  EXPECT_EQ(sum, p.total);
  EXPECT_EQ(j["flags"]["pinned_tokens"], s.engine->pinned_tokens());
}

TEST(Status, PageIsServedWithoutKeyAndStatusNeedsIt) {
  LiveServer::Options o;
  o.server.api_key = "sesame";
  LiveServer s(o);
  auto c = s.client();
  auto r = c.Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(r->body.find("id=\"plan-total\""), std::string::npos);
  EXPECT_EQ(r->body.find("http://"), r->body.find("http://www.w3.org/2000/svg"))
      << "no external requests";
  EXPECT_EQ(r->body.find("https://"), std::string::npos) << "no external requests";
  get_json(c, "/status", 401);
  get_json(c, "/slots", 401);
  get_json(c, "/health", 200);
  c.set_bearer_token_auth("sesame");
  json j = get_json(c, "/status");
  EXPECT_EQ(j["flags"]["api_key"], true);
  EXPECT_EQ(j["slots"].size(), 4u);
  // Only GET / is open: a POST to it still needs the key.
  httplib::Client anon("127.0.0.1", s.port);
  auto post = anon.Post("/", "{}", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 401);
}

}  // namespace
}  // namespace edgelm
