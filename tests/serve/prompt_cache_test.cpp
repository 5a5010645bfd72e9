// Prompt reuse through the API: the next turn of a chat starts from the
// slot that holds its prefix, reports the reused tokens, and answers as a
// server that computed everything would.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

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
  // Another conversation takes the other slot meanwhile.
  post(warm, chat(json::array({{{"role", "user"}, {"content", "something else entirely"}}})));
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
  EXPECT_NE(m->body.find("edgelm_prompt_tokens_reused_total " + std::to_string(cached(a2) + cached(again))),
            std::string::npos);
  auto sl = warm.client().Get("/slots");
  ASSERT_TRUE(sl);
  int total = 0;
  for (const json& s : json::parse(sl->body)) total += s["cached_tokens"].get<int>();
  EXPECT_GT(total, 0);
}

}  // namespace
}  // namespace edgelm
