// Reading a chat answer back: tool calls in the Hermes (<tool_call>) and
// Llama 3 formats, thinking, malformed calls as content, and the streaming
// parser that holds back what may still become a call.
#include "serve/chat_output.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "testutil.h"

namespace edgelm::serve {
namespace {

OutputOptions hermes() {
  OutputOptions o;
  o.format = ToolFormat::Hermes;
  o.tool_names = {"get_weather", "get_time"};
  o.id_base = "call_t";
  return o;
}

OutputOptions llama3() {
  OutputOptions o = hermes();
  o.format = ToolFormat::Llama3;
  return o;
}

OutputOptions thinking() {
  OutputOptions o;
  o.thinking = true;
  return o;
}

// The whole answer at once.
AssistantOut whole(const OutputOptions& o, std::string_view text) {
  ChatOutput p(o);
  std::vector<ChatDelta> ds;
  p.push(text, ds);
  p.finish(ds);
  return join_deltas(ds);
}

// The answer one byte at a time: what is sent never has to be taken back,
// so the deltas joined are what the whole answer gives.
std::vector<ChatDelta> bytewise(const OutputOptions& o, std::string_view text) {
  ChatOutput p(o);
  std::vector<ChatDelta> ds;
  for (char c : text) p.push(std::string_view(&c, 1), ds);
  p.finish(ds);
  return ds;
}

void expect_same(const AssistantOut& a, const AssistantOut& b) {
  EXPECT_EQ(a.content, b.content);
  EXPECT_EQ(a.reasoning, b.reasoning);
  ASSERT_EQ(a.tool_calls.size(), b.tool_calls.size());
  for (size_t i = 0; i < a.tool_calls.size(); ++i) {
    EXPECT_EQ(a.tool_calls[i].id, b.tool_calls[i].id);
    EXPECT_EQ(a.tool_calls[i].name, b.tool_calls[i].name);
    EXPECT_EQ(a.tool_calls[i].arguments, b.tool_calls[i].arguments);
  }
}

TEST(ChatOutput, HermesCall) {
  const AssistantOut a = whole(hermes(),
                               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                               "\"Paris\", \"days\": 2}}\n</tool_call>");
  EXPECT_EQ(a.content, "");
  ASSERT_EQ(a.tool_calls.size(), 1u);
  EXPECT_EQ(a.tool_calls[0].name, "get_weather");
  EXPECT_EQ(a.tool_calls[0].arguments,
            R"({"city":"Paris","days":2})");  // compact, in the model's order
  EXPECT_EQ(a.tool_calls[0].id, "call_t_0");
}

TEST(ChatOutput, HermesSeveralCallsAndText) {
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Oslo\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": \"{\\\"zone\\\": "
      "\\\"CET\\\"}\"}\n</tool_call>\n";
  const AssistantOut a = whole(hermes(), text);
  EXPECT_EQ(a.content, "Let me check.");
  ASSERT_EQ(a.tool_calls.size(), 2u);
  EXPECT_EQ(a.tool_calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(a.tool_calls[1].name, "get_time");
  EXPECT_EQ(a.tool_calls[1].arguments, R"({"zone":"CET"})");  // arguments sent as a string of JSON
  EXPECT_EQ(a.tool_calls[1].id, "call_t_1");
  expect_same(join_deltas(bytewise(hermes(), text)), a);
}

TEST(ChatOutput, MalformedCallsAreContentAsWritten) {
  const std::vector<std::string> bad = {
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>",  // not
                                                                                             // JSON
      "<tool_call>\n{\"name\": \"launch\", \"arguments\": {}}\n</tool_call>",     // not offered
      "<tool_call>\n{\"arguments\": {}}\n</tool_call>",                           // no name
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": [1]}\n</tool_call>",  // not an object
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}",                 // cut short
      "<tool_call>\n{\"name\": \"get_time\"} {\"name\": \"get_time\"}\n</tool_call>",  // two in one
                                                                                       // tag
      "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"a\": " + std::string(5000, '[') +
          std::string(5000, ']') + "}}</tool_call>",  // too deep to be a call
  };
  for (const std::string& t : bad) {
    SCOPED_TRACE(t);
    const AssistantOut a = whole(hermes(), t);
    EXPECT_TRUE(a.tool_calls.empty());
    EXPECT_EQ(a.content, t);
    expect_same(join_deltas(bytewise(hermes(), t)), a);
  }
  // A bad call next to a good one: each is judged on its own.
  const AssistantOut a =
      whole(hermes(),
            "<tool_call>{\"name\": \"nope\"}</tool_call>\n<tool_call>{\"name\": \"get_time\", "
            "\"arguments\": {}}</tool_call>");
  ASSERT_EQ(a.tool_calls.size(), 1u);
  EXPECT_EQ(a.tool_calls[0].arguments, "{}");
  EXPECT_EQ(a.content, "<tool_call>{\"name\": \"nope\"}</tool_call>");
}

TEST(ChatOutput, PlainTextKeepsItsWhitespace) {
  const AssistantOut a = whole(hermes(), "  Hello <b>world</b> <tool a\n\n");
  EXPECT_EQ(a.content, "  Hello <b>world</b> <tool a\n\n");
  EXPECT_TRUE(a.tool_calls.empty());
}

TEST(ChatOutput, StreamingHoldsBackWhatMayBecomeACall) {
  ChatOutput p(hermes());
  std::vector<ChatDelta> ds;
  p.push("Sure. <tool", ds);
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].text, "Sure.");  // " <tool" may start a call: held
  ds.clear();
  p.push("_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_", ds);
  EXPECT_TRUE(ds.empty());  // the call is not whole yet
  p.push("call>", ds);
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].kind, ChatDelta::Kind::ToolCall);
  EXPECT_EQ(ds[0].call.name, "get_time");
  EXPECT_EQ(ds[0].index, 0);
  ds.clear();
  p.push("\n", ds);
  p.finish(ds);
  EXPECT_TRUE(ds.empty());  // whitespace after the last call is not content
  EXPECT_EQ(p.tool_calls(), 1);

  // "<tool" that turns out to be text is sent once decided.
  ChatOutput q(hermes());
  ds.clear();
  q.push("a <tool", ds);
  q.push("box> b", ds);
  EXPECT_EQ(join_deltas(ds).content, "a <toolbox> b");
}

TEST(ChatOutput, Llama3Calls) {
  const std::string one = R"({"name": "get_weather", "parameters": {"city": "Rome"}})";
  AssistantOut a = whole(llama3(), one);
  ASSERT_EQ(a.tool_calls.size(), 1u);
  EXPECT_EQ(a.tool_calls[0].arguments, R"({"city":"Rome"})");
  EXPECT_EQ(a.content, "");
  expect_same(join_deltas(bytewise(llama3(), one)), a);

  a = whole(llama3(), "<|python_tag|>" + one + "; " + R"({"name": "get_time", "parameters": {}})");
  ASSERT_EQ(a.tool_calls.size(), 2u);
  EXPECT_EQ(a.tool_calls[1].name, "get_time");

  for (const std::string& t :
       {std::string("The weather is fine."), std::string(R"({"answer": 42})"),
        std::string(R"({"name": "get_weather", "parameters": {"city": "Ro)"),
        one + " and some words"}) {
    SCOPED_TRACE(t);
    a = whole(llama3(), t);
    EXPECT_TRUE(a.tool_calls.empty());
    EXPECT_EQ(a.content, t);
    expect_same(join_deltas(bytewise(llama3(), t)), a);
  }
}

TEST(ChatOutput, Thinking) {
  const std::string text = "<think>\nThe user wants a greeting.\n</think>\n\nHello!";
  AssistantOut a = whole(thinking(), text);
  EXPECT_EQ(a.reasoning, "The user wants a greeting.");
  EXPECT_EQ(a.content, "Hello!");
  expect_same(join_deltas(bytewise(thinking(), text)), a);
  // Streamed: reasoning deltas come before the content, none empty.
  const std::vector<ChatDelta> ds = bytewise(thinking(), text);
  ASSERT_FALSE(ds.empty());
  EXPECT_EQ(ds.front().kind, ChatDelta::Kind::Reasoning);
  EXPECT_EQ(ds.back().kind, ChatDelta::Kind::Content);
  for (const ChatDelta& d : ds) EXPECT_FALSE(d.text.empty());

  // The prompt opened <think>: the answer starts inside it.
  OutputOptions o = thinking();
  o.starts_in_thinking = true;
  a = whole(o, "Hmm.\n</think>\n\nYes.");
  EXPECT_EQ(a.reasoning, "Hmm.");
  EXPECT_EQ(a.content, "Yes.");
  // Cut short while thinking: all of it is reasoning.
  a = whole(thinking(), "<think>\nStill going");
  EXPECT_EQ(a.reasoning, "Still going");
  EXPECT_EQ(a.content, "");
  // No <think> first: content (a later one is text).
  a = whole(thinking(), "Hi <think>x</think>");
  EXPECT_EQ(a.content, "Hi <think>x</think>");
  EXPECT_EQ(a.reasoning, "");

  // Thinking, then a call.
  OutputOptions both = hermes();
  both.thinking = true;
  const std::string t2 =
      "<think>\nNeed the weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
      "\"arguments\": {}}\n</tool_call>";
  a = whole(both, t2);
  EXPECT_EQ(a.reasoning, "Need the weather.");
  EXPECT_EQ(a.content, "");
  ASSERT_EQ(a.tool_calls.size(), 1u);
  expect_same(join_deltas(bytewise(both, t2)), a);
}

TEST(ChatOutput, PromptOpensThinking) {
  EXPECT_TRUE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n"));
}

std::string read_template(const std::string& name) {
  const std::filesystem::path p =
      std::filesystem::path(EDGELM_SOURCE_DIR) / "assets" / "templates" / name;
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(ChatOutput, TemplateTraitsOfRealTemplates) {
  const std::string qwen = read_template("Qwen-Qwen2.5-7B-Instruct.jinja");
  const std::string qwen3 = read_template("Qwen-Qwen3-0.6B.jinja");
  const std::string llama = read_template("meta-llama-Llama-3.1-8B-Instruct.jinja");
  if (qwen.empty() || qwen3.empty() || llama.empty())
    GTEST_SKIP() << "assets/templates/ not fetched (scripts/fetch-test-assets.sh)";
  TemplateTraits t = template_traits(qwen);
  EXPECT_TRUE(t.tools);
  EXPECT_TRUE(t.tool_calls);
  EXPECT_EQ(t.format, ToolFormat::Hermes);
  EXPECT_FALSE(t.thinks);
  t = template_traits(qwen3);
  EXPECT_EQ(t.format, ToolFormat::Hermes);
  EXPECT_TRUE(t.thinks);
  t = template_traits(llama);
  EXPECT_TRUE(t.tools);
  EXPECT_EQ(t.format, ToolFormat::Llama3);
  // <tool_call> holding XML-like calls (Qwen3-Coder): not a format read back.
  const std::string coder = read_template("Qwen3-Coder.jinja");
  if (!coder.empty()) {
    EXPECT_TRUE(template_traits(coder).tools);
    EXPECT_EQ(template_traits(coder).format, ToolFormat::None);
  }
  // A template that never reads `tools`, though the word is in its text.
  t = template_traits(
      "{# tools are not supported #}{% for m in messages %}{{ m.content }}{% endfor %}");
  EXPECT_FALSE(t.tools);
  EXPECT_FALSE(t.tool_calls);
  EXPECT_EQ(t.format, ToolFormat::None);
}

}  // namespace
}  // namespace edgelm::serve
