// Prompt reuse through the API: the next turn of a chat starts from the
// slot that holds its prefix, reports the reused tokens, and answers as a
// server that computed everything would.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "server_fixture.h"

namespace edgelm {
namespace {

using json = nlohmann::json;
using test::LiveServer;

json chat(const json& messages, bool cache = true) {
  json j = {{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}};
  if (!cache) j["cache_prompt"] = false;
  return j;
}

json post(LiveServer& s, const json& body) {
  auto r = s.client().Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(r);
  if (!r) return {};
  EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body);
}

int cached(const json& reply) { return reply["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(); }

TEST(PromptCache, TheNextTurnReusesItsPrefixAndAnswersTheSame) {
  LiveServer::Options o;
  o.slots = 2;
  LiveServer warm(o);
  o.server.prompt_cache = false;
  LiveServer cold(o);
  json msgs = json::array({{{"role", "system"}, {"content", "you are terse"}}, {{"role", "user"}, {"content", "hello there"}}});
  const json a1 = post(warm, chat(msgs));
  EXPECT_EQ(cached(a1), 0);
  // Another conversation takes the other slot meanwhile (it may copy the
  // template's opening tokens from the first).
  const json other = post(warm, chat(json::array({{{"role", "user"}, {"content", "something else entirely"}}})));
  msgs.push_back({{"role", "assistant"}, {"content", a1["choices"][0]["message"]["content"]}});
  msgs.push_back({{"role", "user"}, {"content", "and then?"}});
  const json a2 = post(warm, chat(msgs));
  EXPECT_GT(cached(a2), a1["usage"]["prompt_tokens"].get<int>() / 2) << a2.dump();
  EXPECT_LT(cached(a2), a2["usage"]["prompt_tokens"].get<int>());
  const json c2 = post(cold, chat(msgs));
  EXPECT_EQ(cached(c2), 0);
  EXPECT_EQ(a2["choices"][0]["message"]["content"], c2["choices"][0]["message"]["content"]);
  // cache_prompt: false neither reuses nor leaves anything behind.
  const json n = post(warm, chat(msgs, false));
  EXPECT_EQ(cached(n), 0);
  const json again = post(warm, chat(msgs));
  EXPECT_GT(cached(again), 0) << "the other slot's cache (from a2) is still there";
  // Counted in /metrics and shown in /slots.
  auto m = warm.client().Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("edgelm_prompt_tokens_reused_total " + std::to_string(cached(other) + cached(a2) + cached(again))),
            std::string::npos);
  auto sl = warm.client().Get("/slots");
  ASSERT_TRUE(sl);
  int total = 0;
  for (const json& s : json::parse(sl->body)) total += s["cached_tokens"].get<int>();
  EXPECT_GT(total, 0);
}

// --system-prompt-file: the system prompt's KV is computed once at start;
// conversations that begin with it, at the same time in different slots,
// compute only their own part and answer as a server that computed it all.
TEST(PromptCache, APinnedSystemPromptIsCopiedIntoEverySlot) {
  const std::string sys = "you are the assistant of an edge board; answer in one short sentence, politely";
  LiveServer::Options o;
  o.slots = 3;
  o.step_ms = 20;  // the three requests overlap
  o.system_prompt = sys;
  LiveServer warm(o);
  const int pinned = warm.engine->pinned_tokens();
  ASSERT_GT(pinned, 10);
  o.system_prompt.clear();
  o.server.prompt_cache = false;
  LiveServer cold(o);
  auto body = [&](const std::string& user) {
    json j = chat(json::array({{{"role", "system"}, {"content", sys}}, {{"role", "user"}, {"content", user}}}));
    j["max_tokens"] = 12;
    return j;
  };
  const std::vector<std::string> users = {"hello", "what time is it", "tell me about the camera"};
  std::vector<json> replies(users.size());
  std::vector<std::thread> ts;
  for (size_t i = 0; i < users.size(); ++i) ts.emplace_back([&, i] { replies[i] = post(warm, body(users[i])); });
  for (auto& t : ts) t.join();
  std::set<int> slots_used;
  for (size_t i = 0; i < users.size(); ++i) {
    ASSERT_TRUE(replies[i].contains("usage")) << replies[i].dump();
    EXPECT_GE(cached(replies[i]), pinned) << i;
    const json c = post(cold, body(users[i]));
    EXPECT_EQ(replies[i]["choices"][0]["message"]["content"], c["choices"][0]["message"]["content"]) << users[i];
  }
  // They ran side by side, so at least two slots copied the pinned rows.
  auto sl = warm.client().Get("/slots");
  ASSERT_TRUE(sl);
  int holding = 0;
  for (const json& s : json::parse(sl->body)) holding += s["cached_tokens"].get<int>() >= pinned;
  EXPECT_EQ(holding, 3) << sl->body;
  auto m = warm.client().Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("edgelm_pinned_prefix_tokens " + std::to_string(pinned)), std::string::npos);
  EXPECT_NE(m->body.find(fmt::format("edgelm_memory_reserved_bytes{{kind=\"pinned\"}} {}",
                                     static_cast<uint64_t>(pinned) * warm.engine->plan().kv_per_token)),
            std::string::npos);
}

// A conversation whose own slot was taken by another copies its prefix
// from wherever it still is (here: a slot running another turn of it).
TEST(PromptCache, APrefixInAnotherSlotIsCopiedNotComputed) {
  LiveServer::Options o;
  o.slots = 2;
  o.ctx = 1024;
  o.step_ms = 20;
  LiveServer s(o);
  std::string long_user;
  for (int i = 0; i < 6; ++i) long_user += "the sensor on pole " + std::to_string(i) + " reads normal. ";
  const json base = json::array({{{"role", "user"}, {"content", long_user}}});
  // A long answer holds slot A with the conversation's prompt computed.
  json first = chat(base);
  first["max_tokens"] = 150;
  std::thread t([&] { post(s, first); });
  ASSERT_TRUE(test::wait_until([&] {
    for (int i = 0; i < 2; ++i)
      if (s.engine->state(i) == Engine::SlotState::Decode) return true;
    return false;
  }, 30));
  // The same conversation's text again, a different question after it.
  json again = base;
  again.push_back({{"role", "assistant"}, {"content", "ok"}});
  again.push_back({{"role", "user"}, {"content", "and pole 3?"}});
  const json r = post(s, chat(again));
  t.join();
  const int prompt_tokens = r["usage"]["prompt_tokens"].get<int>();
  EXPECT_GT(cached(r), prompt_tokens / 2) << r.dump();
}

// 8 clients hold different conversations on 4 slots (they queue for them):
// turns land in whatever slot is free, start from whatever prefix is
// anywhere (their own old slot, the pinned system prompt), and every answer
// equals what a server that computes everything says.
TEST(PromptCache, EightConversationsOnFourSlotsAnswerAsAColdServer) {
  const std::string sys = "you are the gate keeper; answer with few words";
  LiveServer::Options o;
  o.slots = 4;
  o.ctx = 512;
  o.server.admission.queue = 8;
  o.server.admission.queue_timeout_s = 60;
  o.system_prompt = sys;
  LiveServer warm(o);
  o.system_prompt.clear();
  o.server.prompt_cache = false;
  o.step_ms = 1;
  LiveServer cold(o);
  struct Turn {
    json messages;
    json answer;
    int cached = 0;
  };
  std::vector<std::vector<Turn>> turns(8);
  std::vector<std::thread> ts;
  for (int c = 0; c < 8; ++c) {
    ts.emplace_back([&, c] {
      json msgs = json::array({{{"role", "system"}, {"content", sys}}});
      for (int t = 0; t < 3; ++t) {
        msgs.push_back({{"role", "user"}, {"content", "client " + std::to_string(c) + " asks question " + std::to_string(t)}});
        const json r = post(warm, chat(msgs));
        if (!r.contains("choices")) return;
        turns[static_cast<size_t>(c)].push_back({msgs, r["choices"][0]["message"]["content"], cached(r)});
        msgs.push_back({{"role", "assistant"}, {"content", r["choices"][0]["message"]["content"]}});
      }
    });
  }
  for (auto& t : ts) t.join();
  const int pinned = warm.engine->pinned_tokens();
  for (int c = 0; c < 8; ++c) {
    ASSERT_EQ(turns[static_cast<size_t>(c)].size(), 3u) << "client " << c;
    for (const Turn& t : turns[static_cast<size_t>(c)]) {
      EXPECT_GE(t.cached, pinned) << "every turn starts at least from the pinned system prompt";
      const json r = post(cold, chat(t.messages));
      EXPECT_EQ(t.answer, r["choices"][0]["message"]["content"]) << t.messages.dump();
    }
  }
}

}  // namespace
}  // namespace edgelm
