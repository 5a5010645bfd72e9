// Priority classes: slots reserved for the sensors, the class from an API
// key or the X-Priority header, the queue served by class, and preemption.
#include <gtest/gtest.h>

#include <future>
#include <nlohmann/json.hpp>

#include "server_fixture.h"
#include "testutil.h"

namespace edgelm {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using test::chat_body;
using test::LiveServer;
using test::wait_until;

LiveServer::Options two_classes(int slots, int reserve_sensor) {
  LiveServer::Options o;
  o.slots = slots;
  o.step_ms = 10;
  o.server.admission.classes = {{"sensor", reserve_sensor}, {"chat", 0}};
  o.server.default_class = "chat";
  o.server.class_header = true;
  return o;
}

httplib::Result post(const LiveServer& s, const std::string& body, const std::string& cls = "",
                     const std::string& key = "") {
  httplib::Headers h;
  if (!cls.empty()) h.emplace("X-Priority", cls);
  if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
  return s.client().Post("/v1/chat/completions", h, body, "application/json");
}

// Only the trusted header or a key of a more urgent class can make a request
// urgent; without either, the engine bounds no prompt step for urgent
// requests and the gate promotes no prompt.
TEST(Classes, UrgentRequestsArePossibleOnlyThroughTheHeaderOrAKey) {
  serve::ServerOptions o;
  o.admission.classes = {{"sensor", 0}, {"chat", 0}};
  o.default_class = "chat";
  serve::resolve_classes(o);  // edgelm serve's defaults
  EXPECT_EQ(o.admission.default_class, 1);
  EXPECT_FALSE(o.admission.urgent_requests);
  EngineOptions eo;
  serve::keep_promise(o.admission, eo);
  EXPECT_EQ(eo.urgent_classes, 0);

  o.api_key_classes = {{"k1", "chat"}};  // a key of the default class
  serve::resolve_classes(o);
  EXPECT_FALSE(o.admission.urgent_requests);
  o.api_key_classes.push_back({"k2", "sensor"});
  serve::resolve_classes(o);
  EXPECT_TRUE(o.admission.urgent_requests);
  serve::keep_promise(o.admission, eo);
  EXPECT_EQ(eo.urgent_classes, 1);

  o.api_key_classes.clear();
  o.class_header = true;
  serve::resolve_classes(o);
  EXPECT_TRUE(o.admission.urgent_requests);
  o.default_class = "sensor";  // nothing is more urgent than the default
  serve::resolve_classes(o);
  EXPECT_EQ(o.admission.default_class, 0);
  EXPECT_FALSE(o.admission.urgent_requests);
}

TEST(Classes, AReservedSlotIsKeptForTheSensors) {
  LiveServer s(two_classes(2, 1));
  auto chat = std::async(std::launch::async, [&] { return post(s, chat_body("long", 40, false)); });
  ASSERT_TRUE(wait_until([&] { return s.engine->active_slots() == 1; }, 5));
  // The other slot is the sensors': a second chat request is refused ...
  auto r = post(s, chat_body("more", 4, false));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429) << r->body;
  // ... an unknown class name is the default class, refused too ...
  r = post(s, chat_body("more", 4, false), "nonsense");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  // ... and a sensor request gets it.
  r = post(s, chat_body("alarm", 4, false), "sensor");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(chat.get()->status, 200);
  EXPECT_EQ(s.server->admission().admitted(0), 1u);
  EXPECT_EQ(s.server->admission().refused(1), 2u);
  auto m = s.client().Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("edgelm_class_requests_total{class=\"sensor\",result=\"admitted\"} 1"), std::string::npos);
  EXPECT_NE(m->body.find("edgelm_class_requests_total{class=\"chat\",result=\"refused\"} 2"), std::string::npos);
}

TEST(Classes, AnApiKeyNamesTheClassAndIsAValidKey) {
  LiveServer::Options o = two_classes(2, 1);
  o.server.class_header = false;  // the header is not trusted: only keys count
  o.server.api_key = "sk-main";
  o.server.api_key_classes = {{"sk-sensor", "sensor"}};
  LiveServer s(o);
  auto chat = std::async(std::launch::async, [&] { return post(s, chat_body("long", 40, false), "", "sk-main"); });
  ASSERT_TRUE(wait_until([&] { return s.engine->active_slots() == 1; }, 5));
  auto r = post(s, chat_body("x", 4, false), "sensor", "sk-main");  // header ignored
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  r = post(s, chat_body("x", 4, false), "", "sk-sensor");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  r = post(s, chat_body("x", 4, false), "", "sk-wrong");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(chat.get()->status, 200);
}

TEST(Classes, TheQueueServesTheMoreUrgentClassFirst) {
  LiveServer::Options o = two_classes(1, 0);
  o.server.admission.queue = 4;
  o.server.admission.queue_timeout_s = 20;
  LiveServer s(o);
  auto holder = std::async(std::launch::async, [&] { return post(s, chat_body("hold", 20, false)); });
  ASSERT_TRUE(wait_until([&] { return s.engine->active_slots() == 1; }, 5));
  std::mutex mu;
  std::vector<std::string> order;
  auto waiter = [&](std::string cls) {
    return std::async(std::launch::async, [&, cls] {
      auto r = post(s, chat_body("w", 3, false), cls);
      std::lock_guard<std::mutex> lk(mu);
      order.push_back(cls);
      return r ? r->status : -1;
    });
  };
  auto a = waiter("chat");
  ASSERT_TRUE(wait_until([&] { return s.server->admission().queued() == 1; }, 5));
  auto b = waiter("sensor");
  ASSERT_TRUE(wait_until([&] { return s.server->admission().queued() == 2; }, 5));
  EXPECT_EQ(holder.get()->status, 200);
  EXPECT_EQ(a.get(), 200);
  EXPECT_EQ(b.get(), 200);
  EXPECT_EQ(order, (std::vector<std::string>{"sensor", "chat"}));
}

TEST(Classes, PreemptionEndsTheYoungestLessUrgentStream) {
  LiveServer::Options o = two_classes(1, 0);
  o.server.admission.preempt = true;
  LiveServer s(o);
  const uint64_t before = s.engine->stats().generated_tokens;
  auto chat = std::async(std::launch::async, [&] { return post(s, chat_body("long", 200, false)); });
  // The chat stream has produced a token before the sensor arrives (a
  // fixed sleep is not enough under a sanitizer, where the prefill alone
  // takes longer).
  ASSERT_TRUE(wait_until([&] { return s.engine->stats().generated_tokens > before; }, 10));
  auto r = post(s, chat_body("alarm", 4, false), "sensor");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  auto c = chat.get();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->status, 200);
  const json j = json::parse(c->body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "preempted") << c->body;
  EXPECT_LT(j["usage"]["completion_tokens"].get<int>(), 200);
  EXPECT_GT(j["usage"]["completion_tokens"].get<int>(), 0);
  // A request of the same class does not preempt: it is refused.
  auto busy = std::async(std::launch::async, [&] { return post(s, chat_body("long", 100, false)); });
  ASSERT_TRUE(wait_until([&] { return s.engine->active_slots() == 1; }, 5));
  r = post(s, chat_body("x", 4, false));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(busy.get()->status, 200);
}

// A sensor that finds every slot taken (and no --preempt) waits for the
// first one to free when that comes soon enough to keep its first-token
// promise, and is refused at once when it would not.
TEST(Classes, AnUrgentRequestWaitsForASlotThatFreesInTime) {
#ifdef EDGELM_SANITIZED
  GTEST_SKIP() << "timing: a sanitizer slows the engine's own work beside the padded steps; the plain build runs it";
#endif
  LiveServer::Options o = two_classes(2, 1);
  o.token_ms = 2;
  o.server.admission.max_ttft_slowdown = 3;
  LiveServer s(o);
  // Each alarm its own text, so that none is a cached prefix of another.
  auto alarm = [](int n) {
    std::string a = std::to_string(n);
    for (int i = 0; i < 30; ++i) a += " alarm";
    return a;
  };
  // Its unloaded time to first token, alone on the server.
  const auto t0 = Clock::now();
  auto r = post(s, chat_body(alarm(0), 1, false), "sensor");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const double unloaded = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_TRUE(wait_until([&] { return s.engine->active_slots() == 0; }, 5));
  // The first sensor holds its reserved slot for seconds; a chat stream holds
  // the other one until shortly after the second sensor comes, or for long.
  auto held = [&](int chat_tokens, int left) {
    auto chat = std::async(std::launch::async, [&, chat_tokens] { return post(s, chat_body("chat", chat_tokens, false)); });
    EXPECT_TRUE(wait_until([&] { return s.engine->active_slots() == 1; }, 5));
    auto first = std::async(std::launch::async, [&] { return post(s, chat_body("long", 200, false), "sensor"); });
    EXPECT_TRUE(wait_until([&] { return s.engine->active_slots() == 2; }, 5));
    EXPECT_TRUE(wait_until(
        [&] {
          for (int i = 0; i < 2; ++i) {
            const Engine::Progress p = s.engine->progress(i);
            if (p.max_tokens == chat_tokens && p.max_tokens - p.n_out <= left) return true;
          }
          return false;
        },
        10));
    return std::make_pair(std::move(chat), std::move(first));
  };
  {
    auto [chat, first] = held(24, 8);  // 8 steps of ~14 ms left: within 1.6x the unloaded time
    const auto t1 = Clock::now();
    r = post(s, chat_body(alarm(1), 1, false), "sensor");
    const double ttft = std::chrono::duration<double>(Clock::now() - t1).count();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_LE(ttft, 3 * unloaded + 0.05) << "unloaded " << unloaded << " s";
    EXPECT_EQ(chat.get()->status, 200);
    s.engine->cancel_all();
    (void)first.get();
  }
  ASSERT_TRUE(wait_until([&] { return s.engine->active_slots() == 0; }, 5));
  {
    auto [chat, first] = held(200, 190);  // seconds left
    const auto t1 = Clock::now();
    r = post(s, chat_body(alarm(2), 1, false), "sensor");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 429) << r->body;
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t1).count(), 0.5) << "refused at once";
    s.engine->cancel_all();
    (void)chat.get();
    (void)first.get();
  }
}

}  // namespace
}  // namespace edgelm
