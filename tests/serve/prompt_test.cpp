#include "serve/prompt.h"

#include <gtest/gtest.h>

#include "server_fixture.h"
#include "tokenizer/tokenizer.h"

namespace edgelm {
namespace {

using serve::BuiltPrompt;
using serve::GenerationRequest;

struct Fixture {
  tokenizer::Tokenizer tok;
  serve::ChatRenderer tmpl;
};

Fixture load() {
  auto f = gguf::File::open(test::tiny_model_path());
  EXPECT_TRUE(f.ok()) << f.message();
  auto tok = tokenizer::Tokenizer::from_gguf(*f);
  EXPECT_TRUE(tok.ok()) << tok.message();
  auto t = serve::ChatRenderer::builtin("chatml", *tok);
  EXPECT_TRUE(t.ok());
  return {std::move(tok).value(), std::move(t).value()};
}

GenerationRequest chat(int turns) {
  GenerationRequest r;
  r.chat = true;
  r.messages.push_back({"system", "be brief"});
  for (int i = 0; i < turns; ++i) {
    r.messages.push_back({"user", "question " + std::to_string(i)});
    r.messages.push_back({"assistant", "answer " + std::to_string(i)});
  }
  r.messages.push_back({"user", "last question"});
  return r;
}

std::string text_of(const Fixture& f, const BuiltPrompt& p) { return f.tok.decode(p.tokens); }

TEST(Prompt, AChatThatFitsIsUntouched) {
  Fixture f = load();
  auto b = serve::build_prompt(f.tok, &f.tmpl, "", chat(2), 1024, 1000, serve::Truncate::KeepEnd);
  ASSERT_TRUE(std::holds_alternative<BuiltPrompt>(b));
  EXPECT_EQ(std::get<BuiltPrompt>(b).dropped, 0);
}

// 1,500 turns (3,002 messages): whole turns are dropped, oldest first; the
// system message and the newest turns stay; the result is the longest tail
// of turns that fits (one more turn would not).
TEST(Prompt, ALongChatDropsTheOldestWholeTurns) {
  Fixture f = load();
  const GenerationRequest r = chat(1500);
  const int limit = 200;
  auto b = serve::build_prompt(f.tok, &f.tmpl, "", r, 256, limit, serve::Truncate::KeepEnd);
  ASSERT_TRUE(std::holds_alternative<BuiltPrompt>(b));
  const BuiltPrompt& p = std::get<BuiltPrompt>(b);
  EXPECT_LE(static_cast<int>(p.tokens.size()), limit);
  EXPECT_GT(p.dropped, 0);
  const std::string text = text_of(f, p);
  EXPECT_NE(text.find("be brief"), std::string::npos);
  EXPECT_NE(text.find("last question"), std::string::npos);
  EXPECT_EQ(text.find("question 0<"), std::string::npos);
  // Whole turns: it starts (after the system message) with a user turn.
  const size_t after_system = text.find("<|im_start|>", text.find("be brief"));
  EXPECT_EQ(text.compare(after_system, 16, "<|im_start|>user"), 0) << text.substr(after_system, 40);
  // The longest tail: keeping one more turn would not fit.
  const size_t first_q = text.find("question ");
  const int oldest = std::stoi(text.substr(first_q + 9));
  GenerationRequest more;
  more.chat = true;
  more.messages.push_back(r.messages[0]);
  more.messages.insert(more.messages.end(), r.messages.begin() + 1 + 2 * (oldest - 1), r.messages.end());
  auto bigger = serve::build_prompt(f.tok, &f.tmpl, "", more, 256, 1 << 20, serve::Truncate::KeepEnd);
  ASSERT_TRUE(std::holds_alternative<BuiltPrompt>(bigger));
  EXPECT_GT(static_cast<int>(std::get<BuiltPrompt>(bigger).tokens.size()), limit);
}

TEST(Prompt, TruncateNoneRefusesWithTheSizes) {
  Fixture f = load();
  auto b = serve::build_prompt(f.tok, &f.tmpl, "", chat(100), 256, 200, serve::Truncate::None);
  ASSERT_TRUE(std::holds_alternative<serve::ApiError>(b));
  EXPECT_EQ(std::get<serve::ApiError>(b).code, "prompt_too_long");
  EXPECT_NE(std::get<serve::ApiError>(b).message.find("at most 200 prompt tokens fit"), std::string::npos);
}

TEST(Prompt, LimitKeepsRoomForTheAnswer) {
  EXPECT_EQ(serve::prompt_limit(256, 16), 240);
  EXPECT_EQ(serve::prompt_limit(256, 1000), 192);  // at most a quarter of the slot
  EXPECT_EQ(serve::prompt_limit(256, 0), 255);
}

}  // namespace
}  // namespace edgelm
