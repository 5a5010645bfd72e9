#include "serve/server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>

#include "core/sysmem.h"
#include "server_fixture.h"
#include "testutil.h"
#include "tokenizer/unicode.h"

namespace edgelm {
namespace {

using json = nlohmann::json;
using test::chat_body;
using test::LiveServer;
using test::wait_until;

json parse(const std::string& s) { return json::parse(s); }

TEST(Serve, HealthReadyModelsAndMetrics) {
  LiveServer s({});
  auto c = s.client();
  auto r = c.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = c.Get("/ready");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(parse(r->body)["free_slots"], 4);
  r = c.Get("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(parse(r->body)["object"], "list");
  r = c.Get("/metrics");
  ASSERT_TRUE(r);
  for (const char* name : {"edgelm_slots_total 4", "edgelm_requests_total{status=\"429\"}",
                           "edgelm_rejections_total{reason=\"throughput\"}", "edgelm_time_to_first_token_seconds_bucket",
                           "edgelm_memory_reserved_bytes{kind=\"kv\"}", "edgelm_resident_memory_bytes"})
    EXPECT_NE(r->body.find(name), std::string::npos) << name;
  r = c.Get("/slots");
  ASSERT_TRUE(r);
  EXPECT_EQ(parse(r->body).size(), 4u);
  r = c.Get("/nope");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_TRUE(parse(r->body).contains("error"));
}

TEST(Serve, ChatAndCompletionNonStreamed) {
  LiveServer s({});
  auto c = s.client();
  auto r = c.Post("/v1/chat/completions", chat_body("hello there", 8, false), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 3);
  r = c.Post("/v1/completions", R"({"prompt":"once upon","max_tokens":5,"temperature":0,"logprobs":3})", "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  j = parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["usage"]["completion_tokens"].get<int>() + j["usage"]["prompt_tokens"].get<int>(), j["usage"]["total_tokens"].get<int>());
  EXPECT_EQ(j["choices"][0]["logprobs"]["token_logprobs"].size(), j["usage"]["completion_tokens"].get<size_t>());
  EXPECT_TRUE(s.wait_idle());
}

TEST(Serve, StreamsServerSentEvents) {
  LiveServer s({});
  auto c = s.client();
  std::string body;
  auto r = c.Post("/v1/chat/completions", chat_body("stream please", 6, true, R"("stream_options":{"include_usage":true})"),
                  "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  // data: {...}\n\n events, the usage chunk, then [DONE].
  std::vector<json> events;
  size_t pos = 0;
  bool done = false;
  while ((pos = r->body.find("data: ", pos)) != std::string::npos) {
    const size_t end = r->body.find("\n\n", pos);
    ASSERT_NE(end, std::string::npos);
    const std::string data = r->body.substr(pos + 6, end - pos - 6);
    if (data == "[DONE]") done = true;
    else events.push_back(parse(data));
    pos = end + 2;
  }
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(events[events.size() - 2]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 6);
  EXPECT_TRUE(s.wait_idle());
}

// The acceptance scenario: 4 slots, 8 concurrent streams -> 4 run, 4 get 429
// with Retry-After at once; after one ends, a new request is admitted.
TEST(Serve, EightConcurrentStreamsOnFourSlots) {
  LiveServer::Options o;
  o.slots = 4;
  o.step_ms = 50;  // 40 tokens take ~2 s: all eight overlap, even on a loaded machine
  LiveServer s(o);
  std::vector<std::future<std::tuple<int, std::string, double>>> fs;
  for (int i = 0; i < 8; ++i) {
    fs.push_back(std::async(std::launch::async, [&] {
      auto c = s.client();
      const auto t0 = std::chrono::steady_clock::now();
      auto r = c.Post("/v1/chat/completions", chat_body("go", 40, true), "application/json");
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!r) return std::make_tuple(-1, std::string(), sec);
      return std::make_tuple(r->status, r->get_header_value("Retry-After"), sec);
    }));
  }
  int ok = 0, busy = 0;
  for (auto& f : fs) {
    auto [status, retry, sec] = f.get();
    if (status == 200) ++ok;
    if (status == 429) {
      ++busy;
      EXPECT_FALSE(retry.empty());
      EXPECT_GE(std::stoi(retry), 1);
      EXPECT_LT(sec, 1.0) << "a refusal must not wait for the work it refuses (2 s)";
    }
  }
  EXPECT_EQ(ok, 4);
  EXPECT_EQ(busy, 4);
  ASSERT_TRUE(s.wait_idle());
  auto c = s.client();
  auto r = c.Post("/v1/chat/completions", chat_body("again", 4, false), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(s.server->metrics().rejections[static_cast<size_t>(serve::Reason::Slots)].load(), 4u);
}

TEST(Serve, AFreedSlotIsTakenByTheNextRequest) {
  LiveServer::Options o;
  o.slots = 1;
  o.step_ms = 10;
  LiveServer s(o);
  auto first = std::async(std::launch::async, [&] {
    auto c = s.client();
    return c.Post("/v1/chat/completions", chat_body("one", 30, false), "application/json");
  });
  // Admitted (30 tokens of 10 ms steps follow).
  ASSERT_TRUE(wait_until([&] { return s.engine->active_slots() == 1; }, 5));
  auto c = s.client();
  auto busy = c.Post("/v1/chat/completions", chat_body("two", 5, false), "application/json");
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->status, 429);
  auto r1 = first.get();
  ASSERT_TRUE(r1);
  EXPECT_EQ(r1->status, 200);
  auto r2 = c.Post("/v1/chat/completions", chat_body("two", 5, false), "application/json");
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->status, 200);
}

// Every slot taken and no queue: a request is refused before its body is
// parsed (even a malformed one gets the 429, and is counted as refused);
// with room in the queue it is parsed first, since it could wait.
TEST(Serve, AFullServerRefusesBeforeParsing) {
  for (int queue : {0, 1}) {
    LiveServer::Options o;
    o.slots = 1;
    o.step_ms = 10;
    o.server.admission.queue = queue;
    LiveServer s(o);
    auto first = std::async(std::launch::async, [&] {
      return s.client().Post("/v1/chat/completions", chat_body("one", 40, false), "application/json");
    });
    ASSERT_TRUE(wait_until([&] { return s.engine->active_slots() == 1; }, 5));
    const int cls = s.server->admission().options().default_class;
    const uint64_t refused = s.server->admission().refused(cls);
    auto c = s.client();
    for (const std::string& body : {std::string("{"), chat_body("x", 1000000000, false)}) {
      auto r = c.Post("/v1/chat/completions", body, "application/json");
      ASSERT_TRUE(r);
      if (queue == 0) {
        EXPECT_EQ(r->status, 429) << body << " -> " << r->body;
        EXPECT_EQ(parse(r->body)["error"]["code"], "slots");
        EXPECT_FALSE(r->get_header_value("Retry-After").empty());
      } else {
        EXPECT_EQ(r->status, 400) << body << " -> " << r->body;
      }
    }
    EXPECT_EQ(s.server->admission().refused(cls) - refused, queue == 0 ? 2u : 0u) << "queue " << queue;
    EXPECT_EQ(first.get()->status, 200);
    // The slot free again: the malformed body is parsed, and gets its 400.
    auto r = c.Post("/v1/chat/completions", "{", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
  }
}

TEST(Serve, BoundedQueueWaitsThenTimesOut) {
  LiveServer::Options o;
  o.slots = 1;
  o.step_ms = 10;
  o.server.admission.queue = 1;
  o.server.admission.queue_timeout_s = 5;
  LiveServer s(o);
  auto first = std::async(std::launch::async, [&] {
    return s.client().Post("/v1/chat/completions", chat_body("one", 20, false), "application/json");
  });
  ASSERT_TRUE(wait_until([&] { return s.engine->active_slots() == 1; }, 5));
  auto queued = std::async(std::launch::async, [&] {
    return s.client().Post("/v1/chat/completions", chat_body("two", 5, false), "application/json");
  });
  ASSERT_TRUE(wait_until([&] { return s.server->admission().queued() == 1; }, 5));
  // The queue holds one: a third is refused at once (the first runs for
  // at least 20 steps of 10 ms).
  auto third = s.client().Post("/v1/chat/completions", chat_body("three", 5, false), "application/json");
  ASSERT_TRUE(third);
  EXPECT_EQ(third->status, 429);
  EXPECT_EQ(first.get()->status, 200);
  EXPECT_EQ(queued.get()->status, 200);  // it got the slot when the first ended
}

// Steps cost 20 ms + 30 ms per token: one stream gets 20 tokens/s, two 12.5,
// three 9. A gate whose floor is 10 tokens/s admits two streams and refuses
// a third though slots are free; /ready says so while the two run.
void expect_two_streams_then_throughput_429(LiveServer& s) {
  auto a = std::async(std::launch::async, [&] {
    return s.client().Post("/v1/completions", R"({"prompt":"a","max_tokens":40,"ignore_eos":true})", "application/json");
  });
  auto b = std::async(std::launch::async, [&] {
    return s.client().Post("/v1/completions", R"({"prompt":"b","max_tokens":40,"ignore_eos":true})", "application/json");
  });
  ASSERT_TRUE(wait_until([&] { return s.engine->active_slots() == 2; }, 5));
  // A few steps with both streams, measured by the step-time model.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  auto third = s.client().Post("/v1/completions", R"({"prompt":"c","max_tokens":5})", "application/json");
  ASSERT_TRUE(third);
  EXPECT_EQ(third->status, 429) << third->body;
  EXPECT_EQ(parse(third->body)["error"]["code"], "throughput");
  EXPECT_FALSE(third->get_header_value("Retry-After").empty());
  EXPECT_EQ(s.client().Get("/ready")->status, 503);
  EXPECT_EQ(a.get()->status, 200);
  EXPECT_EQ(b.get()->status, 200);
  EXPECT_EQ(s.client().Get("/ready")->status, 200);
}

LiveServer::Options twenty_plus_thirty_ms() {
  LiveServer::Options o;
  o.slots = 4;
  o.step_ms = 20;
  o.token_ms = 30;
  return o;
}

// The absolute floor: --min-stream-rate 10.
TEST(Serve, ThroughputGateRefusesWhatWouldSlowEveryone) {
  LiveServer::Options o = twenty_plus_thirty_ms();
  o.server.admission.min_stream_rate = 10;
  LiveServer s(o);
  const serve::Decision d = s.server->admission().peek();
  EXPECT_TRUE(d.ok());
  // A lone stream: 20 tokens/s with the padded steps, lower when the machine
  // is slower than the padding (ASan beside another build measured 16.8), and
  // above the floor of 10 either way.
  EXPECT_GT(d.predicted_rate, 10.5);
  EXPECT_LT(d.predicted_rate, 23.0);
  expect_two_streams_then_throughput_429(s);
}

// The relative gate: --max-slowdown 2 promises every stream half of a lone
// stream's 20 tokens/s, with no absolute floor set.
TEST(Serve, MaxSlowdownRefusesAStreamThatWouldHalveTheOthersSpeed) {
  LiveServer::Options o = twenty_plus_thirty_ms();
  o.server.admission.min_stream_rate = 0;
  o.server.admission.max_slowdown = 2;
  LiveServer s(o);
  expect_two_streams_then_throughput_429(s);
}

// Two slots, a queue of two, steps of 10 ms + 30 ms per token and
// --max-slowdown 2: two streams (70 ms steps) keep half of a lone stream's
// speed (40 ms steps), a third (100 ms) would not. With both slots held, a
// request waits for one and then runs as one of two streams: it must queue,
// not be refused as the third stream it can never be, and the second
// waiter must keep its place when the first is handed a slot.
TEST(Serve, AQueuedRequestIsNotShedAsAStreamBeyondTheSlots) {
  LiveServer::Options o;
  o.slots = 2;
  o.step_ms = 10;
  o.token_ms = 30;
  o.server.admission.min_stream_rate = 0;
  o.server.admission.max_slowdown = 2;
  o.server.admission.queue = 2;
  o.server.admission.queue_timeout_s = 30;
  LiveServer s(o);
  auto post = [&](const char* prompt, int max_tokens) {
    const std::string body = json({{"prompt", prompt}, {"max_tokens", max_tokens}, {"ignore_eos", true}}).dump();
    return std::async(std::launch::async,
                      [&s, body] { return s.client().Post("/v1/completions", body, "application/json"); });
  };
  auto a = post("a", 20);
  auto b = post("b", 20);
  ASSERT_TRUE(wait_until([&] { return s.engine->active_slots() == 2; }, 5));
  // A few steps of two streams, measured by the step-time model.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  auto c = post("c", 5);
  ASSERT_TRUE(wait_until([&] { return s.server->admission().queued() >= 1; }, 5));
  auto d = post("d", 5);
  for (auto* f : {&a, &b, &c, &d}) {
    auto r = f->get();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  }
  EXPECT_EQ(s.server->metrics().rejections[static_cast<size_t>(serve::Reason::Throughput)].load(), 0u);
}

TEST(Serve, DisconnectMidStreamFreesTheSlot) {
  LiveServer::Options o;
  o.slots = 1;
  o.step_ms = 20;
  LiveServer s(o);
  auto c = s.client();
  int chunks = 0;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = chat_body("long", 200, true);
  req.set_header("Content-Type", "application/json");
  // Hang up after a few chunks.
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 3; };
  auto r = c.send(req);
  EXPECT_FALSE(r);
  EXPECT_EQ(chunks, 3);
  // The server notices at its next write and frees the slot within a step or two.
  EXPECT_TRUE(s.wait_idle(2.0)) << "slot still held after the client left";
  // Counted just after the slot is released (stream.cpp's releaser): under
  // TSan the test could read it in between.
  EXPECT_TRUE(wait_until([&] { return s.server->metrics().client_disconnects.load() >= 1u; }, 2))
      << "the disconnect was not counted";
  auto again = s.client().Post("/v1/chat/completions", chat_body("next", 3, false), "application/json");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
}

TEST(Serve, DisconnectDuringNonStreamedGenerationFreesTheSlot) {
  LiveServer::Options o;
  o.slots = 1;
  o.step_ms = 20;
  LiveServer s(o);
  // A client that sends its request, waits a little and hangs up.
  const std::string body = chat_body("long", 200, false);
  // Hangs up once the request holds the slot and generates (a fixed wait
  // raced the admission under TSan).
  ASSERT_TRUE(test::send_and_hang_up_when(
      s.port, test::post_request("/v1/chat/completions", body),
      [&] { return s.engine->state(0) == Engine::SlotState::Decode; }, 10))
      << "the request never reached its first token";
  EXPECT_EQ(s.engine->active_slots(), 1);
  // The next heartbeat write fails and the slot is freed (200 tokens would take 4 s).
  EXPECT_TRUE(s.wait_idle(2.0)) << "slot still held after the client left";
}

// A client that hangs up while its prompt is being prefilled: the slot is
// freed (the first write after the hang-up fails) and the next request gets it.
TEST(Serve, DisconnectMidPrefillFreesTheSlot) {
  LiveServer::Options o;
  o.slots = 1;
  o.step_ms = 10;
  o.token_ms = 5;  // a 64-token prefill step takes ~330 ms
  LiveServer s(o);
  std::string words;
  for (int i = 0; i < 150; ++i) words += "lorem ";
  const std::string body = chat_body(words, 50, true);
  // Hangs up while the prompt is being prefilled (a fixed 200 ms could pass
  // before the request was even admitted, under TSan).
  ASSERT_TRUE(test::send_and_hang_up_when(
      s.port, test::post_request("/v1/chat/completions", body),
      [&] { return s.engine->state(0) == Engine::SlotState::Prefill; }, 10))
      << "the request never reached prefill";
  EXPECT_TRUE(s.wait_idle(3.0)) << "slot still held after the client left mid-prefill";
  auto r = s.client().Post("/v1/chat/completions", chat_body("next", 3, false), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// A client that hangs up while it waits in the queue leaks nothing: its
// place in the queue and any slot it reaches are given back, and later
// requests are served.
TEST(Serve, DisconnectWhileQueuedLeaksNothing) {
  LiveServer::Options o;
  o.slots = 1;
  o.step_ms = 10;
  o.server.admission.queue = 1;
  o.server.admission.queue_timeout_s = 5;
  LiveServer s(o);
  auto first = std::async(std::launch::async, [&] {
    return s.client().Post("/v1/chat/completions", chat_body("one", 30, false), "application/json");
  });
  ASSERT_TRUE(wait_until([&] { return s.engine->active_slots() == 1; }, 5));
  const std::string body = chat_body("two", 200, false);
  test::post_and_hang_up(s.port, "/v1/chat/completions", body, 100);
  EXPECT_EQ(first.get()->status, 200);
  // The gate watches a waiter's socket: the vanished client leaves the
  // queue and never takes the slot (Gate.AClientThatLeavesTheQueueIsNeverAdmitted).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while ((s.server->admission().queued() != 0 || s.engine->active_slots() != 0) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(s.server->admission().queued(), 0);
  EXPECT_EQ(s.engine->active_slots(), 0) << "slot held by a client that left while queued";
  for (int i = 0; i < 2; ++i) {
    auto r = s.client().Post("/v1/chat/completions", chat_body("later", 3, false), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
}

TEST(Serve, TruncatesLongPromptsByPolicy) {
  LiveServer::Options o;
  o.ctx = 64;
  LiveServer s(o);
  std::string longtext;
  for (int i = 0; i < 200; ++i) longtext += "the cat sat on the mat. ";
  auto r = s.client().Post("/v1/completions", json({{"prompt", longtext}, {"max_tokens", 8}}).dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = parse(r->body);
  EXPECT_GT(j["edgelm"]["prompt_tokens_dropped"].get<int>(), 100);
  EXPECT_LE(j["usage"]["prompt_tokens"].get<int>() + j["usage"]["completion_tokens"].get<int>(), 64);
  EXPECT_FALSE(r->get_header_value("X-Edgelm-Prompt-Tokens-Dropped").empty());
  // Chat: old turns go first; the system message and the last turn stay.
  json chat = {{"max_tokens", 4},
               {"messages",
                {{{"role", "system"}, {"content", "be brief"}},
                 {{"role", "user"}, {"content", longtext.substr(0, 300)}},
                 {{"role", "assistant"}, {"content", "ok"}},
                 {{"role", "user"}, {"content", "last question"}}}}};
  r = s.client().Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_GT(parse(r->body)["edgelm"]["prompt_tokens_dropped"].get<int>(), 0);
  EXPECT_TRUE(s.wait_idle());
}

TEST(Serve, RefusesLongPromptsWithTruncateNone) {
  LiveServer::Options o;
  o.ctx = 64;
  o.server.truncate = serve::Truncate::None;
  LiveServer s(o);
  std::string longtext(2000, 'a');
  auto r = s.client().Post("/v1/completions", json({{"prompt", longtext}, {"max_tokens", 8}}).dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  json j = parse(r->body);
  EXPECT_EQ(j["error"]["code"], "prompt_too_long");
  EXPECT_NE(j["error"]["message"].get<std::string>().find("tokens"), std::string::npos);
  EXPECT_TRUE(s.wait_idle());
}

TEST(Serve, BadRequestsGet400AndLeakNoSlot) {
  LiveServer s({});
  auto c = s.client();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", ""},
      {"[]", ""},
      {R"({"messages":[]})", "messages"},
      {R"({"messages":{}})", "messages"},
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})", "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":-1})", "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":-5})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1.5})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_p":7})", "top_p"},
      {R"({"messages":[{"role":"user","content":"x"}],"n":3})", "n"},
      {R"({"messages":[{"role":"wizard","content":"x"}]})", "role"},
      {"{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", ""},
  };
  for (const auto& [body, field] : cases) {
    auto r = c.Post("/v1/chat/completions", body, "application/json");
    ASSERT_TRUE(r) << body;
    EXPECT_EQ(r->status, 400) << body << " -> " << r->body;
    json j = json::parse(r->body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r->body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(field), std::string::npos) << body << " -> " << r->body;
  }
  // A max_tokens no slot could ever hold is refused, naming the slot's size ...
  auto r = c.Post("/v1/chat/completions", chat_body("x", 1000000000, false), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("a slot holds 256 tokens"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("max_tokens is 1000000000,"), std::string::npos) << r->body;
  // (one beyond an int is said to be so, not given as the clamped value)
  r = c.Post("/v1/chat/completions",
             R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1e12})",
             "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("max_tokens is 2147483647 or more"), std::string::npos) << r->body;
  // ... one that only this prompt makes too large is clamped to the room left.
  r = c.Post("/v1/chat/completions", chat_body("x", 255, false), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["finish_reason"], "length");
  // Oversized bodies: 413.
  r = c.Post("/v1/chat/completions", std::string(1 << 20, ' '), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_TRUE(s.wait_idle());
  EXPECT_EQ(s.engine->active_slots(), 0);
}

TEST(Serve, TokenizeAndDetokenize) {
  LiveServer s({});
  auto c = s.client();
  auto r = c.Post("/tokenize", R"({"content":"the hat"})", "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  auto toks = parse(r->body)["tokens"];
  EXPECT_GT(toks.size(), 1u);
  r = c.Post("/detokenize", json({{"tokens", toks}}).dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(parse(r->body)["content"], "the hat");  // the space prefix is removed, as llama.cpp does
  r = c.Post("/detokenize", R"({"tokens":[99999999]})", "application/json");
  EXPECT_EQ(r->status, 400);
}

// A JSON body is read as JSON whatever Content-Type it came with: curl -d
// sends a form's type, which httplib by itself would refuse over 8 KiB (a
// 413 naming --max-body, far above it), and a multipart type would be read
// as parts and refused as unreadable.
TEST(Serve, AJsonBodyIsReadWhateverItsContentType) {
  LiveServer s({});
  auto c = s.client();
  json body = json::parse(test::chat_body("hello", 2, false));
  body["user"] = std::string(9000, 'x');  // past httplib's 8 KiB for forms
  for (const char* type : {"application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                           "text/plain", "application/json"}) {
    auto r = c.Post("/v1/chat/completions", body.dump(), type);
    ASSERT_TRUE(r) << type;
    EXPECT_EQ(r->status, 200) << type << ": " << r->body;
  }
  EXPECT_TRUE(s.wait_idle());
}

// A route asked with the wrong method is a 405 naming the methods it takes
// (Allow), not a 404 as if it were not there; a path that is not there is.
TEST(Serve, AWrongMethodIsA405WithAllow) {
  LiveServer s({});
  auto c = s.client();
  auto r = c.Get("/v1/chat/completions");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "POST");
  EXPECT_EQ(parse(r->body)["error"]["code"], "method_not_allowed");
  r = c.Post("/health", "", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "GET, HEAD");
  r = c.Get("/v1/no-such-route");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(parse(r->body)["error"]["code"], "not_found");
  r = c.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// /tokenize's flags are booleans (anything else is the client's error, not
// a 500), and with_pieces gives each id with its text, as llama-server does:
// a string, or the bytes as numbers where they are not UTF-8 on their own.
TEST(Serve, TokenizeChecksItsFlagsAndGivesPieces) {
  LiveServer s({});
  auto c = s.client();
  for (const char* body :
       {R"({"content":"hi","add_special":"yes"})", R"({"content":"hi","parse_special":1})",
        R"({"content":"hi","with_pieces":[]})"}) {
    auto r = c.Post("/tokenize", body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << body;
    EXPECT_EQ(parse(r->body)["error"]["code"], "invalid_type") << body;
  }
  const std::string text = "the hat \xc3\xa9\xe4\xb8\x80";  // é and a CJK character
  auto r = c.Post("/tokenize", json({{"content", text}}).dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const json plain = parse(r->body)["tokens"];
  r = c.Post("/tokenize", json({{"content", text}, {"with_pieces", true}}).dump(),
             "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const json pieces = parse(r->body)["tokens"];
  ASSERT_EQ(pieces.size(), plain.size());
  std::string joined;
  int as_bytes = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(pieces[i]["id"], plain[i]);
    const json& piece = pieces[i]["piece"];
    if (piece.is_string()) {
      joined += piece.get<std::string>();
      continue;
    }
    ASSERT_TRUE(piece.is_array());
    ++as_bytes;
    std::string bytes;
    for (const json& b : piece) bytes += static_cast<char>(b.get<int>());
    EXPECT_FALSE(tokenizer::utf8_is_valid(bytes)) << "piece " << i << " is text, sent as bytes";
    joined += bytes;
  }
  EXPECT_GT(as_bytes, 0) << "the characters outside the vocabulary came as whole-text pieces";
  // The pieces are the text (after the space a SentencePiece vocabulary puts first).
  EXPECT_EQ(joined.substr(joined.size() - text.size()), text);
}

// The text of many long tokens is measured before it is made: over 4x
// --max-body it is refused, however short the list of ids. (Qwen2's
// vocabulary has pieces of up to 256 bytes, an id takes 6 in the body.)
TEST(Serve, DetokenizeKeepsItsTextWithinFourBodies) {
  EDGELM_REQUIRE_VOCAB(vocab, "ggml-vocab-qwen2.gguf");
  const std::string path = test::temp_path("serve-tiny-llama-qwen2-vocab.gguf");
  if (!std::filesystem::exists(path)) {
    SynthOptions so;
    so.shape = "tiny-llama";
    so.ftype = "Q8_0";
    so.vocab = vocab;
    so.output = path;
    ASSERT_TRUE(write_synthetic_model(so).ok());
  }
  LiveServer::Options o;
  o.model = path;
  o.server.max_body_bytes = 4096;
  LiveServer s(o);
  const auto& tok = s.engine->tokenizer();
  int32_t longest = 0;
  for (int32_t t = 0; t < tok.n_vocab(); ++t)
    if (tok.token_piece_view(t, true).size() > tok.token_piece_view(longest, true).size())
      longest = t;
  const size_t piece = tok.token_piece_view(longest, true).size();
  // Ids that fit the body but whose text does not fit four bodies, and
  // half as many, whose text does.
  const size_t over = 4 * 4096 / piece + 1;
  const std::string too_long = json({{"tokens", std::vector<int32_t>(over, longest)}}).dump();
  ASSERT_LT(too_long.size(), 4096u);
  auto c = s.client();
  auto r = c.Post("/detokenize", too_long, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(parse(r->body)["error"]["code"], "text_too_long");
  r = c.Post("/detokenize", json({{"tokens", std::vector<int32_t>(over / 2, longest)}}).dump(),
             "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

// A stop asked while the server is starting (a SIGTERM right after start,
// or a test that ends at once) is not lost: httplib's own stop does nothing
// before its accept loop runs, and the server then accepted forever.
TEST(Serve, AStopAskedAsTheServerStartsIsNotLost) {
  for (int i = 0; i < 5; ++i) {
    LiveServer s({});
    s.server->stop();  // right after run()'s thread started: usually before it listens
    auto joined = std::async(std::launch::async, [&] { s.thread.join(); });
    const bool stopped = joined.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
    if (!stopped) {
      s.server->stop();  // it runs by now: stopped, so that the test fails rather than hangs
      joined.wait();
    }
    EXPECT_TRUE(stopped) << "round " << i;
  }
}

TEST(Serve, ApiKey) {
  LiveServer::Options o;
  o.server.api_key = "sesame";
  LiveServer s(o);
  auto c = s.client();
  EXPECT_EQ(c.Get("/health")->status, 200);
  EXPECT_EQ(c.Get("/v1/models")->status, 401);
  httplib::Headers h = {{"Authorization", "Bearer sesame"}};
  EXPECT_EQ(c.Get("/v1/models", h)->status, 200);
}

TEST(Serve, StopStringsEndTheAnswer) {
  LiveServer s({});
  auto c = s.client();
  // Greedy output is deterministic: find its text, then stop at a piece of it.
  auto r = c.Post("/v1/completions", R"({"prompt":"a b","max_tokens":12,"temperature":0,"ignore_eos":true})", "application/json");
  ASSERT_TRUE(r);
  const std::string full = parse(r->body)["choices"][0]["text"];
  ASSERT_GT(full.size(), 6u);
  // One whole character from the middle (the output is valid UTF-8; the
  // tiny model's text is noise, often multi-byte).
  auto is_cont = [&](size_t i) { return (static_cast<unsigned char>(full[i]) & 0xC0) == 0x80; };
  size_t at = full.size() / 2;
  while (at > 0 && is_cont(at)) --at;
  size_t end = at + 1;
  while (end < full.size() && is_cont(end)) ++end;
  const std::string stop = full.substr(at, end - at);
  r = c.Post("/v1/completions", json({{"prompt", "a b"}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}, {"stop", stop}}).dump(),
             "application/json");
  ASSERT_TRUE(r);
  json j = parse(r->body);
  EXPECT_EQ(j["choices"][0]["text"], full.substr(0, full.find(stop)));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(s.wait_idle());
}

// Resident memory does not grow with the number of requests served.
TEST(Serve, ResidentMemoryFlatOverAThousandRequests) {
#ifdef EDGELM_SANITIZED
  GTEST_SKIP() << "a sanitizer's allocator keeps freed memory (ASan's quarantine, TSan's shadow): "
                  "RSS is measured in the plain build";
#endif
  LiveServer::Options o;
  o.slots = 4;
  o.step_ms = 0;
  LiveServer s(o);
  auto run = [&](int n) {
    std::vector<std::thread> ts;
    for (int k = 0; k < 4; ++k) {
      ts.emplace_back([&, k] {
        auto c = s.client();
        for (int i = k; i < n; i += 4) {
          auto r = c.Post("/v1/chat/completions", chat_body("memory " + std::to_string(i), 8, i % 2 == 0), "application/json");
          ASSERT_TRUE(r);
        }
      });
    }
    for (auto& t : ts) t.join();
  };
  run(200);  // warm-up: thread stacks, allocator arenas, connection buffers
  const uint64_t warm = current_rss_bytes();
  run(1000);
  const uint64_t after = current_rss_bytes();
  EXPECT_LT(static_cast<double>(after), static_cast<double>(warm) * 1.02)
      << "RSS grew from " << warm << " to " << after << " bytes over 1000 requests";
  EXPECT_TRUE(s.wait_idle());
}

// Many long texts at once, to /tokenize and as chat prompts, raise the
// resident size, at its peak and after, by little more than their bodies:
// the texts in preparation share a budget the memory plan counts, a long
// text's symbols are held a word at a time, and /tokenize's ids are written
// without a JSON tree. (32 /tokenize calls of 200 kB kept about 120 MB as
// malloc's high-water mark; 32 such chat requests to the Qwen2 synthetic
// file raised the peak by 330 MB.)
TEST(Serve, ManyLongTextsAtOnceRaiseResidentMemoryLittle) {
#ifdef EDGELM_SANITIZED
  GTEST_SKIP() << "a sanitizer's allocator keeps freed memory: RSS is measured in the plain build";
#endif
  // As edgelm serve does at start. It takes effect only before other
  // threads have made arenas of their own: the test is meant to run alone
  // in its process, as ctest runs each.
  limit_malloc_arenas();
  LiveServer::Options o;
  o.slots = 2;
  o.server.max_body_bytes = 256 << 10;
  o.server.truncate = serve::Truncate::None;
  LiveServer s(o);
  std::string text;
  for (int i = 0; text.size() < 200000; ++i) text += (i % 7 == 0 ? "abc " : "the quick fox ");
  std::atomic<int> ok{0};
  std::atomic<size_t> commas{0};
  // 24 requests at once, each on a raw client that keeps none of the reply
  // (this process is the clients' too): its status and its commas counted.
  const auto run = [&](const std::string& path, const std::string& content,
                       const std::string& status) {
    ok = 0;
    const std::string request = "POST " + path +
                                " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: "
                                "application/json\r\nContent-Length: " +
                                std::to_string(content.size()) + "\r\n\r\n" + content;
    std::vector<std::thread> ts;
    for (int k = 0; k < 24; ++k) {
      ts.emplace_back([&] {
        const int fd = test::connect_loopback(s.port);
        if (fd < 0) return;
        if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(request.size())) {
          timeval tv{60, 0};
          setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
          char buf[4096];
          std::string head;
          size_t n_commas = 0;
          for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) {
            if (head.size() < 12) head.append(buf, static_cast<size_t>(n));
            n_commas += static_cast<size_t>(std::count(buf, buf + n, ','));
          }
          if (head.rfind("HTTP/1.1 " + status, 0) == 0) {
            commas = n_commas;
            ++ok;
          }
        }
        ::close(fd);
      });
    }
    for (auto& t : ts) t.join();
  };
  const auto reset_peak = [] { std::ofstream("/proc/self/clear_refs") << "5"; };
  // Warm-up: the workers' stacks, the connections' buffers.
  run("/tokenize", R"({"content":"warm up the workers and their connections"})", "200");
  ASSERT_EQ(ok.load(), 24);
  struct Case {
    std::string path, body, status;
  };
  const Case cases[] = {
      {"/tokenize", json{{"content", text}}.dump(), "200"},
      // Too long for a slot (refused after its tokens are counted).
      {"/v1/chat/completions", json{{"messages", {{{"role", "user"}, {"content", text}}}}}.dump(),
       "400"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    reset_peak();
    const uint64_t before = current_rss_bytes();
    run(c.path, c.body, c.status);
    EXPECT_EQ(ok.load(), 24);
    if (c.path == "/tokenize") {
      EXPECT_GT(commas.load(), 10000u) << "a long reply indeed";
    }
    const uint64_t peak = peak_rss_bytes(), after = current_rss_bytes();
    // The bodies (24 x 200 kB) and the budget's work, with room for the
    // allocator: after +2-6 MB measured (+66-80 MB before, /tokenize).
    EXPECT_LT(after, before + (16u << 20))
        << "RSS grew from " << before << " to " << after << " bytes";
    EXPECT_LT(peak, before + (24u << 20)) << "RSS peaked at " << peak << " bytes from " << before;
  }
}

}  // namespace
}  // namespace edgelm

namespace edgelm {
namespace {

// A non-streamed answer is held whole: one that could outgrow what the plan
// counts for it is refused (streaming it is not), and the plan counts it.
TEST(Serve, NonStreamedAnswersStayWithinThePlan) {
  LiveServer::Options o;
  o.server.max_response_bytes = 64 << 10;
  LiveServer s(o);
  auto c = s.client();
  const std::string big = R"({"prompt":"a","max_tokens":200,"logprobs":20,"ignore_eos":true})";
  auto r = c.Post("/v1/completions", big, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("stream it"), std::string::npos) << r->body;
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "top_logprobs");
  r = c.Post("/v1/completions", R"({"prompt":"a","max_tokens":200,"logprobs":20,"ignore_eos":true,"stream":true})",
             "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = c.Post("/v1/completions", R"({"prompt":"a","max_tokens":5,"logprobs":2,"ignore_eos":true})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  serve::ServerOptions so;
  so.max_response_bytes = 1 << 20;
  const uint64_t with = serve::server_buffer_bytes(so, 4);
  so.max_response_bytes = 0;
  EXPECT_EQ(with - serve::server_buffer_bytes(so, 4), 4u << 20);
  EXPECT_GE(serve::non_streamed_answer_bytes(10, 2, 8), 10u * (7 * 8 + 3 * (96 + 11 * 8)));
  EXPECT_TRUE(s.wait_idle());
}

}  // namespace
}  // namespace edgelm

namespace edgelm {
namespace {

// response_format through the server: the answers parse and end by the
// constraint (stop), streamed or not; too small a max_tokens is a 400.
TEST(Serve, ResponseFormatJsonSchema) {
  LiveServer s({});
  auto c = s.client();
  const std::string rf =
      R"("response_format":{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object","properties":)"
      R"({"n":{"type":"integer","minimum":1,"maximum":9},"s":{"type":"string","maxLength":4}},"required":["n","s"]}}})";
  for (bool stream : {false, true}) {
    const std::string body = std::string(R"({"messages":[{"role":"user","content":"json"}],"max_tokens":60,"stream":)") +
                             (stream ? "true" : "false") + "," + rf + "}";
    auto r = c.Post("/v1/chat/completions", body, "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    std::string content, finish;
    if (!stream) {
      const json j = json::parse(r->body);
      content = j["choices"][0]["message"]["content"];
      finish = j["choices"][0]["finish_reason"];
    } else {
      for (size_t p = r->body.find("data: {"); p != std::string::npos; p = r->body.find("data: {", p + 1)) {
        const json ev = json::parse(r->body.substr(p + 6, r->body.find("\n\n", p) - p - 6));
        if (ev["choices"].empty()) continue;
        const json& ch = ev["choices"][0];
        if (ch["delta"].contains("content")) content += ch["delta"]["content"].get<std::string>();
        if (ch["finish_reason"].is_string()) finish = ch["finish_reason"];
      }
    }
    EXPECT_EQ(finish, "stop") << content;
    const json v = json::parse(content, nullptr, false);
    ASSERT_TRUE(v.is_object()) << content;
    EXPECT_GE(v["n"].get<int>(), 1);
    EXPECT_LE(v["n"].get<int>(), 9);
    EXPECT_LE(v["s"].get<std::string>().size(), 4u * 4);
  }
  auto r = c.Post("/v1/chat/completions",
                  std::string(R"({"messages":[{"role":"user","content":"json"}],"max_tokens":5,)") + rf + "}",
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "max_tokens") << r->body;
  EXPECT_TRUE(s.wait_idle());
}

}  // namespace
}  // namespace edgelm
