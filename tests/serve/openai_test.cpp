#include "serve/openai.h"

#include <gtest/gtest.h>

#include <climits>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

namespace edgelm::serve {
namespace {

using nlohmann::json;
using namespace std::string_literals;

bool parses(const std::string& s) {
  return !json::parse(s, nullptr, false).is_discarded();
}

// {"messages":[{"role":"user","content":"hi"}], <extra>}
std::string chat_body(const std::string& extra = "") {
  std::string b = R"({"messages":[{"role":"user","content":"hi"}])";
  if (!extra.empty()) b += "," + extra;
  return b + "}";
}

std::string completion_body(const std::string& extra = "") {
  std::string b = R"({"prompt":"Once upon a time")";
  if (!extra.empty()) b += "," + extra;
  return b + "}";
}

GenerationRequest chat_ok(const std::string& body, const RequestLimits& lim = {}) {
  ParsedRequest r = parse_chat_request(body, lim);
  if (const auto* e = std::get_if<ApiError>(&r)) {
    ADD_FAILURE() << "refused: " << e->message << "\nbody: " << body.substr(0, 300);
    return {};
  }
  return std::get<GenerationRequest>(std::move(r));
}

GenerationRequest completion_ok(const std::string& body, const RequestLimits& lim = {}) {
  ParsedRequest r = parse_completion_request(body, lim);
  if (const auto* e = std::get_if<ApiError>(&r)) {
    ADD_FAILURE() << "refused: " << e->message << "\nbody: " << body.substr(0, 300);
    return {};
  }
  return std::get<GenerationRequest>(std::move(r));
}

ApiError refused(const ParsedRequest& r, const std::string& body) {
  if (const auto* e = std::get_if<ApiError>(&r)) return *e;
  ADD_FAILURE() << "accepted: " << body.substr(0, 300);
  return {};
}

ApiError chat_err(const std::string& body, const RequestLimits& lim = {}) {
  return refused(parse_chat_request(body, lim), body);
}

ApiError completion_err(const std::string& body, const RequestLimits& lim = {}) {
  return refused(parse_completion_request(body, lim), body);
}

// A 400 whose message quotes the field and whose param is the field.
void expect_names(const ApiError& e, const std::string& field) {
  EXPECT_EQ(e.status, 400) << e.message;
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_NE(e.message.find("'" + field + "'"), std::string::npos)
      << "message does not name '" << field << "': " << e.message;
  EXPECT_EQ(e.param, field) << e.message;
}

struct BadCase {
  std::string extra;  // fields added to a valid body
  std::string field;  // the field the message and param must name
};


// ---------------------------------------------------------------------------
// Errors

TEST(OpenAiError, HasOpenAiShape) {
  ApiError e = invalid_request("'temperature' must be a number between 0 and 2, got 3",
                               "temperature", "invalid_value");
  json j = json::parse(error_json(e));
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j.size(), 1u);
  const json& err = j.at("error");
  EXPECT_EQ(err.at("message"), "'temperature' must be a number between 0 and 2, got 3");
  EXPECT_EQ(err.at("type"), "invalid_request_error");
  EXPECT_EQ(err.at("param"), "temperature");
  EXPECT_EQ(err.at("code"), "invalid_value");
  EXPECT_EQ(e.status, 400);
}

TEST(OpenAiError, EmptyParamAndCodeAreNull) {
  ApiError e;
  e.status = 500;
  e.type = "server_error";
  e.message = "boom";
  json j = json::parse(error_json(e));
  EXPECT_TRUE(j["error"].at("param").is_null());
  EXPECT_TRUE(j["error"].at("code").is_null());
  EXPECT_EQ(j["error"]["type"], "server_error");
}

TEST(OpenAiError, InvalidUtf8InMessageIsReplaced) {
  ApiError e = invalid_request("bad \xC3( byte", "x\xFF");
  json j = json::parse(error_json(e));  // must not throw
  EXPECT_EQ(j["error"]["message"], "bad \xEF\xBF\xBD( byte");
}

TEST(OpenAiError, TemperatureMessageIsExact) {
  ApiError e = chat_err(chat_body(R"("temperature":3)"));
  EXPECT_EQ(e.message, "'temperature' must be a number between 0 and 2, got 3");
  EXPECT_EQ(e.code, "invalid_value");
  e = chat_err(chat_body(R"("temperature":"hot")"));
  EXPECT_EQ(e.message, "'temperature' must be a number between 0 and 2, got a string");
  EXPECT_EQ(e.code, "invalid_type");
}

// A value inside an open bound as a double but on it as a float (the
// sampler's type) is refused as the bound itself is, with the API's message,
// not let through to fail the sampler's own check.
TEST(OpenAiError, AnOpenBoundHoldsAfterTheFloat) {
  ApiError e = chat_err(chat_body(R"("top_p":1e-300)"));
  EXPECT_EQ(e.message, "'top_p' must be a number greater than 0 and at most 1, got 1e-300");
  EXPECT_EQ(e.param, "top_p");
  e = chat_err(chat_body(R"("repeat_penalty":1e-50)"));
  EXPECT_EQ(e.param, "repeat_penalty");
  EXPECT_FLOAT_EQ(chat_ok(chat_body(R"("top_p":1e-30)")).sampling.top_p, 1e-30f);
}

// An empty string is named as such: "must be a non-empty string, got a
// string" would read as a contradiction.
TEST(OpenAiError, AnEmptyStringIsNamedEmpty) {
  ApiError e = chat_err(chat_body(R"("stop":["a",""])"));
  EXPECT_EQ(e.message, "'stop[1]' must be a non-empty string, got an empty string");
  EXPECT_EQ(e.code, "invalid_value");
  e = chat_err(chat_body(R"("temperature":"")"));
  EXPECT_EQ(e.message, "'temperature' must be a number between 0 and 2, got an empty string");
}

// ---------------------------------------------------------------------------
// Chat requests: what is accepted

TEST(OpenAiChat, MinimalRequestHasOpenAiDefaults) {
  GenerationRequest r = chat_ok(chat_body());
  EXPECT_TRUE(r.chat);
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "hi");
  EXPECT_EQ(r.model, "");
  EXPECT_EQ(r.max_tokens, -1);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.0f);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.0f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, 0.0f);
  EXPECT_FLOAT_EQ(r.sampling.repeat_penalty, 1.0f);
  EXPECT_FALSE(r.seed_given);
  EXPECT_TRUE(r.stop.empty());
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_EQ(r.top_logprobs, -1);
  EXPECT_FALSE(r.ignore_eos);
  EXPECT_TRUE(r.prompt.empty());
  EXPECT_TRUE(r.prompt_tokens.empty());
  EXPECT_TRUE(r.sampling.validate().ok());
}

TEST(OpenAiChat, EveryAcceptedField) {
  GenerationRequest r = chat_ok(R"({
    "model": "qwen2-1.5b",
    "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "developer", "content": "dev"},
      {"role": "user", "content": "hi", "name": "bob"},
      {"role": "assistant", "content": "hello"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    ],
    "max_tokens": 100,
    "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
    "presence_penalty": 0.5, "frequency_penalty": -0.5, "repeat_penalty": 1.1,
    "seed": 42, "stop": ["\n\n", "END"], "n": 1, "stream": true,
    "stream_options": {"include_usage": true},
    "logprobs": true, "top_logprobs": 5,
    "response_format": {"type": "text"},
    "user": "u-1", "ignore_eos": true,
    "some_future_field": {"x": [1, 2, 3]}
  })");
  EXPECT_EQ(r.model, "qwen2-1.5b");
  ASSERT_EQ(r.messages.size(), 5u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].role, "system");  // developer
  EXPECT_EQ(r.messages[1].content, "dev");
  EXPECT_EQ(r.messages[2].role, "user");
  EXPECT_EQ(r.messages[3].role, "assistant");
  EXPECT_EQ(r.messages[4].content, "ab");
  EXPECT_EQ(r.max_tokens, 100);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.sampling.repeat_penalty, 1.1f);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.top_logprobs, 5);
  EXPECT_TRUE(r.ignore_eos);
}

TEST(OpenAiChat, NullMeansNotGiven) {
  GenerationRequest r = chat_ok(chat_body(
      R"("model":null,"max_tokens":null,"temperature":null,"top_p":null,"seed":null,"stop":null,)"
      R"("n":null,"stream":null,"stream_options":null,"logprobs":null,"top_logprobs":null,)"
      R"("tools":null,"tool_choice":null,"response_format":null,"user":null,"logit_bias":null)"));
  EXPECT_EQ(r.max_tokens, -1);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_FALSE(r.seed_given);
  EXPECT_EQ(r.top_logprobs, -1);
}

TEST(OpenAiChat, MaxTokensForms) {
  EXPECT_EQ(chat_ok(chat_body(R"("max_tokens":1)")).max_tokens, 1);
  EXPECT_EQ(chat_ok(chat_body(R"("max_completion_tokens":77)")).max_tokens, 77);
  EXPECT_EQ(chat_ok(chat_body(R"("max_tokens":5,"max_completion_tokens":9)")).max_tokens, 9);
  EXPECT_EQ(chat_ok(chat_body(R"("max_tokens":64.0)")).max_tokens, 64);
  // Absurd values are accepted and clamped to what an int holds.
  EXPECT_EQ(chat_ok(chat_body(R"("max_tokens":1e12)")).max_tokens, INT_MAX);
  EXPECT_EQ(chat_ok(chat_body(R"("max_tokens":1000000000000)")).max_tokens, INT_MAX);
  EXPECT_EQ(chat_ok(chat_body(R"("max_tokens":18446744073709551615)")).max_tokens, INT_MAX);
  EXPECT_EQ(chat_ok(chat_body(R"("max_tokens":123456789012345678901234567890)")).max_tokens,
            INT_MAX);
  EXPECT_EQ(chat_ok(chat_body(R"("max_tokens":2147483647)")).max_tokens, INT_MAX);
}

TEST(OpenAiChat, SeedForms) {
  auto seed = [](const std::string& v) {
    GenerationRequest r = chat_ok(chat_body("\"seed\":" + v));
    EXPECT_TRUE(r.seed_given) << v;
    return r.sampling.seed;
  };
  EXPECT_EQ(seed("0"), 0u);
  EXPECT_EQ(seed("-1"), UINT64_MAX);
  EXPECT_EQ(seed("-9223372036854775808"), uint64_t{1} << 63);
  EXPECT_EQ(seed("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(seed("9223372036854775807"), uint64_t{INT64_MAX});
  EXPECT_EQ(seed("1e3"), 1000u);
  EXPECT_EQ(seed("-2.0"), UINT64_MAX - 1);
}

TEST(OpenAiChat, SamplingBounds) {
  // Inclusive and exclusive ends as documented.
  EXPECT_FLOAT_EQ(chat_ok(chat_body(R"("temperature":0)")).sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(chat_ok(chat_body(R"("temperature":2)")).sampling.temperature, 2.0f);
  EXPECT_FLOAT_EQ(chat_ok(chat_body(R"("top_p":1)")).sampling.top_p, 1.0f);
  EXPECT_FLOAT_EQ(chat_ok(chat_body(R"("top_p":0.001)")).sampling.top_p, 0.001f);
  EXPECT_FLOAT_EQ(chat_ok(chat_body(R"("min_p":1)")).sampling.min_p, 1.0f);
  EXPECT_FLOAT_EQ(chat_ok(chat_body(R"("presence_penalty":-2)")).sampling.presence_penalty, -2.0f);
  EXPECT_FLOAT_EQ(chat_ok(chat_body(R"("frequency_penalty":2)")).sampling.frequency_penalty, 2.0f);
  EXPECT_FLOAT_EQ(chat_ok(chat_body(R"("repeat_penalty":10)")).sampling.repeat_penalty, 10.0f);
  EXPECT_EQ(chat_ok(chat_body(R"("top_k":0)")).sampling.top_k, 0);
  EXPECT_EQ(chat_ok(chat_body(R"("top_k":1e15)")).sampling.top_k, INT_MAX);
}

TEST(OpenAiChat, StopForms) {
  EXPECT_EQ(chat_ok(chat_body(R"("stop":"###")")).stop, (std::vector<std::string>{"###"}));
  EXPECT_TRUE(chat_ok(chat_body(R"("stop":[])")).stop.empty());
  std::string sixteen = "\"stop\":[";
  for (int i = 0; i < kMaxStop; ++i) sixteen += (i ? ",\"s" : "\"s") + std::to_string(i) + "\"";
  EXPECT_EQ(chat_ok(chat_body(sixteen + "]")).stop.size(), 16u);
}

TEST(OpenAiChat, LogprobsForms) {
  EXPECT_EQ(chat_ok(chat_body(R"("logprobs":false)")).top_logprobs, -1);
  EXPECT_EQ(chat_ok(chat_body(R"("logprobs":true)")).top_logprobs, 0);
  EXPECT_EQ(chat_ok(chat_body(R"("logprobs":true,"top_logprobs":0)")).top_logprobs, 0);
  EXPECT_EQ(chat_ok(chat_body(R"("logprobs":true,"top_logprobs":20)")).top_logprobs, 20);
}

TEST(OpenAiChat, EmptyToolsAndNoneChoiceAreHarmless) {
  GenerationRequest r =
      chat_ok(chat_body(R"("tools":[],"tool_choice":"none","functions":[],"logit_bias":{})"));
  EXPECT_EQ(r.messages.size(), 1u);
  chat_ok(R"({"messages":[{"role":"assistant","content":null,"tool_calls":[]},)"
          R"({"role":"user","content":"x"}]})");
}

constexpr const char* kWeatherTool =
    R"({"type":"function","function":{"name":"get_weather","description":"Weather now.",)"
    R"("parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},)"
    R"("required":["city"]}}})";

TEST(OpenAiChat, ToolsAndToolChoice) {
  GenerationRequest r = chat_ok(chat_body(std::string(R"("tools":[)") + kWeatherTool + "]"));
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0].name, "get_weather");
  EXPECT_EQ(r.tool_choice, ToolChoice::Auto);  // the default with tools
  EXPECT_TRUE(r.parallel_tool_calls);
  // The tool as sent, keys in the order sent (the template shows it so).
  EXPECT_EQ(r.tools[0].json, kWeatherTool);
  EXPECT_FALSE(r.tools[0].schema);  // auto: nothing is constrained, nothing compiled
  EXPECT_EQ(r.tools[0].parameters,
            R"({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]})");

  const std::string tools = std::string(R"("tools":[)") + kWeatherTool +
                            R"(,{"type":"function","function":{"name":"get_time"}}])";
  r = chat_ok(chat_body(tools + R"(,"tool_choice":"required","parallel_tool_calls":false)"));
  EXPECT_EQ(r.tool_choice, ToolChoice::Required);
  EXPECT_FALSE(r.parallel_tool_calls);
  ASSERT_EQ(r.tools.size(), 2u);
  EXPECT_TRUE(r.tools[0].schema);  // required: every function's arguments are constrained
  EXPECT_TRUE(r.tools[1].schema);
  EXPECT_EQ(r.tools[1].parameters, R"({"type":"object","properties":{}})");  // no parameters: none

  r = chat_ok(chat_body(tools + R"(,"tool_choice":{"type":"function","function":{"name":"get_time"}})"));
  EXPECT_EQ(r.tool_choice, ToolChoice::Function);
  EXPECT_EQ(r.tool_choice_name, "get_time");
  EXPECT_FALSE(r.tools[0].schema);
  EXPECT_TRUE(r.tools[1].schema);
  EXPECT_EQ(chat_ok(chat_body(tools + R"(,"tool_choice":"none")")).tool_choice, ToolChoice::None);
  EXPECT_EQ(chat_ok(chat_body(tools + R"(,"tool_choice":"auto")")).tool_choice, ToolChoice::Auto);

  r = chat_ok(chat_body(R"("chat_template_kwargs":{"enable_thinking":false,"a":[1,{"z":1,"b":2}]})"));
  EXPECT_EQ(r.template_kwargs, R"({"enable_thinking":false,"a":[1,{"z":1,"b":2}]})");
}

TEST(OpenAiChat, BadToolsAreNamed) {
  const std::string ok = kWeatherTool;
  const std::vector<BadCase> cases = {
      {R"("tools":[1])", "tools[0]"},
      {R"("tools":[{"function":{"name":"f"}}])", "tools[0].type"},
      {R"("tools":[{"type":"code_interpreter"}])", "tools[0].type"},
      {R"("tools":[{"type":"function"}])", "tools[0].function"},
      {R"("tools":[{"type":"function","function":"f"}])", "tools[0].function"},
      {R"("tools":[{"type":"function","function":{}}])", "tools[0].function.name"},
      {R"("tools":[{"type":"function","function":{"name":"a b"}}])", "tools[0].function.name"},
      {R"("tools":[{"type":"function","function":{"name":""}}])", "tools[0].function.name"},
      {R"("tools":[{"type":"function","function":{"name":"f","description":3}}])", "tools[0].function.description"},
      {R"("tools":[{"type":"function","function":{"name":"f","parameters":"x"}}])", "tools[0].function.parameters"},
      {R"("tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}])",
       "tools[1].function.name"},
      {R"("tools":[)" + ok + R"(],"tool_choice":"sometimes")", "tool_choice"},
      {R"("tools":[)" + ok + R"(],"tool_choice":5)", "tool_choice"},
      {R"("tools":[)" + ok + R"(],"tool_choice":{"type":"function","function":{"name":"nope"}})",
       "tool_choice.function.name"},
      {R"("tools":[)" + ok + R"(],"tool_choice":{"type":"tool"})", "tool_choice.type"},
      {R"("tool_choice":"required")", "tool_choice"},
      {R"("tools":[)" + ok + R"(],"parallel_tool_calls":"yes")", "parallel_tool_calls"},
      // A forced call needs the schema enforced: a keyword that is not is named.
      {R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","not":{}}}}],)"
       R"("tool_choice":"required")",
       "tools[0].function.parameters"},
      {R"("tools":[)" + ok + R"(],"tool_choice":"required","response_format":{"type":"json_object"})",
       "response_format"},
      {R"("chat_template_kwargs":true)", "chat_template_kwargs"},
      {R"("chat_template_kwargs":{"messages":[]})", "chat_template_kwargs.messages"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.extra);
    expect_names(chat_err(chat_body(c.extra)), c.field);
  }
  // Under auto the schema is not enforced, so it is not refused.
  chat_ok(chat_body(R"("tools":[{"type":"function","function":{"name":"f","parameters":{"not":{}}}}])"));
}

TEST(OpenAiChat, ToolCallsAndResultsInMessages) {
  GenerationRequest r = chat_ok(
      R"({"messages":[{"role":"user","content":"Weather?"},)"
      R"({"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",)"
      R"("function":{"name":"get_weather","arguments":"{\"city\": \"Paris\", \"days\": 1}"}},)"
      R"({"id":"call_2","type":"function","function":{"name":"get_time","arguments":{"zone":"CET","a":1}}}]},)"
      R"({"role":"tool","tool_call_id":"call_1","content":"sunny"},)"
      R"({"role":"assistant","content":"Sunny.","reasoning_content":"Easy."}]})");
  ASSERT_EQ(r.messages.size(), 4u);
  const ChatMessage& a = r.messages[1];
  EXPECT_EQ(a.content, "");
  ASSERT_EQ(a.tool_calls.size(), 2u);
  EXPECT_EQ(a.tool_calls[0].id, "call_1");
  EXPECT_EQ(a.tool_calls[0].name, "get_weather");
  EXPECT_EQ(a.tool_calls[0].arguments, R"({"city": "Paris", "days": 1})");  // the string as sent
  EXPECT_EQ(a.tool_calls[1].arguments, R"({"zone":"CET","a":1})");          // an object, in its order
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, "call_1");
  EXPECT_EQ(r.messages[2].content, "sunny");
  EXPECT_EQ(r.messages[3].reasoning_content, "Easy.");

  const std::vector<BadCase> cases = {
      {R"("messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"[1]"}}]}])",
       "messages[0].tool_calls[0].function.arguments"},
      {R"("messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{"}}]}])",
       "messages[0].tool_calls[0].function.arguments"},
      {R"("messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":"{}"}}]}])",
       "messages[0].tool_calls[0].function.name"},
      {R"("messages":[{"role":"assistant","tool_calls":{}}])", "messages[0].tool_calls"},
      {R"("messages":[{"role":"user","content":"x","tool_calls":[{"function":{"name":"f"}}]}])",
       "messages[0].tool_calls"},
      {R"("messages":[{"role":"tool","content":"x","tool_call_id":5}])", "messages[0].tool_call_id"},
      {R"("messages":[{"role":"tool"}])", "messages[0].content"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.extra);
    expect_names(chat_err("{" + c.extra + "}"), c.field);
  }
}

TEST(OpenAiChat, AssistantMayHaveNoContent) {
  GenerationRequest r =
      chat_ok(R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null},)"
              R"({"role":"assistant"},{"role":"user","content":""}]})");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[1].content, "");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.messages[3].content, "");  // an empty user turn is allowed
}

TEST(OpenAiChat, UnicodeEscapesAndNulBytesSurvive) {
  GenerationRequest r = chat_ok(
      R"({"messages":[{"role":"user","content":"caf\u00e9 \ud83d\ude00 a\u0000b \u4e2d"}]})");
  EXPECT_EQ(r.messages[0].content, "caf\xC3\xA9 \xF0\x9F\x98\x80 a\0b \xE4\xB8\xAD"s);
}

TEST(OpenAiChat, ContentAtTheLimitIsAccepted) {
  RequestLimits lim;
  lim.max_content_bytes = 10;
  EXPECT_EQ(chat_ok(R"({"messages":[{"role":"user","content":"0123456789"}]})", lim)
                .messages[0]
                .content.size(),
            10u);
  EXPECT_EQ(chat_ok(R"({"messages":[{"role":"user","content":[{"type":"text","text":"01234"},)"
                    R"({"type":"text","text":"56789"}]}]})",
                    lim)
                .messages[0]
                .content,
            "0123456789");
}

TEST(OpenAiChat, MessageCountAtTheLimitIsAccepted) {
  RequestLimits lim;
  lim.max_messages = 3;
  std::string b = R"({"messages":[)";
  for (int i = 0; i < 3; ++i) b += std::string(i ? "," : "") + R"({"role":"user","content":"x"})";
  EXPECT_EQ(chat_ok(b + "]}", lim).messages.size(), 3u);
  b += R"(,{"role":"user","content":"x"}]})";
  expect_names(chat_err(b, lim), "messages");
}

// ---------------------------------------------------------------------------
// Chat requests: what is refused, each naming its field

TEST(OpenAiChat, BadFieldsAreNamed) {
  const std::vector<BadCase> cases = {
      {R"("model":3)", "model"},
      {R"("temperature":"hot")", "temperature"},
      {R"("temperature":-0.1)", "temperature"},
      {R"("temperature":2.0001)", "temperature"},
      {R"("temperature":true)", "temperature"},
      {R"("temperature":[1])", "temperature"},
      {R"("temperature":1e400)", "temperature"},
      {R"("temperature":-1e400)", "temperature"},
      {R"("top_p":0)", "top_p"},
      {R"("top_p":1.5)", "top_p"},
      {R"("top_p":"1")", "top_p"},
      {R"("top_k":-1)", "top_k"},
      {R"("top_k":1.5)", "top_k"},
      {R"("top_k":"5")", "top_k"},
      {R"("min_p":-0.01)", "min_p"},
      {R"("min_p":1.01)", "min_p"},
      {R"("presence_penalty":2.5)", "presence_penalty"},
      {R"("presence_penalty":-3)", "presence_penalty"},
      {R"("frequency_penalty":-2.5)", "frequency_penalty"},
      {R"("frequency_penalty":{})", "frequency_penalty"},
      {R"("repeat_penalty":0)", "repeat_penalty"},
      {R"("repeat_penalty":-1)", "repeat_penalty"},
      {R"("repeat_penalty":11)", "repeat_penalty"},
      {R"("seed":"42")", "seed"},
      {R"("seed":1.5)", "seed"},
      {R"("seed":1e20)", "seed"},
      {R"("seed":-1e19)", "seed"},
      {R"("seed":1e400)", "seed"},
      {R"("max_tokens":0)", "max_tokens"},
      {R"("max_tokens":-5)", "max_tokens"},
      {R"("max_tokens":1.5)", "max_tokens"},
      {R"("max_tokens":"100")", "max_tokens"},
      {R"("max_tokens":1e400)", "max_tokens"},
      {R"("max_tokens":-1e400)", "max_tokens"},
      {R"("max_tokens":-9223372036854775808)", "max_tokens"},
      {R"("max_completion_tokens":0)", "max_completion_tokens"},
      {R"("max_completion_tokens":true)", "max_completion_tokens"},
      {R"("n":2)", "n"},
      {R"("n":0)", "n"},
      {R"("n":"1")", "n"},
      {R"("stream":"yes")", "stream"},
      {R"("stream":1)", "stream"},
      {R"("stream_options":true)", "stream_options"},
      {R"("stream_options":{"include_usage":"yes"})", "stream_options.include_usage"},
      {R"("stop":"")", "stop"},
      {R"("stop":5)", "stop"},
      {R"("stop":{"a":1})", "stop"},
      {R"("stop":["a",""])", "stop[1]"},
      {R"("stop":["a",3])", "stop[1]"},
      {R"("stop":["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"])",
       "stop"},
      {R"("logprobs":"true")", "logprobs"},
      {R"("logprobs":1)", "logprobs"},
      {R"("top_logprobs":3)", "top_logprobs"},  // without logprobs
      {R"("logprobs":true,"top_logprobs":21)", "top_logprobs"},
      {R"("logprobs":true,"top_logprobs":-1)", "top_logprobs"},
      {R"("logprobs":true,"top_logprobs":2.5)", "top_logprobs"},
      {R"("response_format":{"type":"json_schema","json_schema":{}})", "response_format.json_schema.schema"},
      {R"("response_format":{"type":"xml"})", "response_format.type"},
      {R"("response_format":{"type":"json_object"},"stop":["x"])", "stop"},
      {R"("response_format":"text")", "response_format"},
      {R"("response_format":{})", "response_format.type"},
      {R"("response_format":{"type":1})", "response_format.type"},
      {R"("tools":{})", "tools"},
      {R"("tool_choice":"auto")", "tool_choice"},  // without tools
      {R"("tool_choice":{"type":"function"})", "tool_choice.function"},
      {R"("functions":[{"name":"f"}])", "functions"},
      {R"("function_call":"auto")", "function_call"},
      {R"("logit_bias":{"50256":-100})", "logit_bias"},
      {R"("user":5)", "user"},
      {R"("ignore_eos":"true")", "ignore_eos"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.extra);
    expect_names(chat_err(chat_body(c.extra)), c.field);
  }
}

TEST(OpenAiChat, BadMessagesAreNamed) {
  const std::vector<BadCase> cases = {
      {R"("messages":{})", "messages"},
      {R"("messages":"hi")", "messages"},
      {R"("messages":[])", "messages"},
      {R"("messages":[1])", "messages[0]"},
      {R"("messages":[{"content":"x"}])", "messages[0].role"},
      {R"("messages":[{"role":5,"content":"x"}])", "messages[0].role"},
      {R"("messages":[{"role":"robot","content":"x"}])", "messages[0].role"},
      {R"("messages":[{"role":"function","content":"x"}])", "messages[0].role"},
      {R"("messages":[{"role":"user"}])", "messages[0].content"},
      {R"("messages":[{"role":"user","content":null}])", "messages[0].content"},
      {R"("messages":[{"role":"user","content":5}])", "messages[0].content"},
      {R"("messages":[{"role":"user","content":{"text":"x"}}])", "messages[0].content"},
      {R"("messages":[{"role":"user","content":[]}])", "messages[0].content"},
      {R"("messages":[{"role":"user","content":["x"]}])", "messages[0].content[0]"},
      {R"("messages":[{"role":"user","content":[{"text":"x"}]}])", "messages[0].content[0].type"},
      {R"("messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}])",
       "messages[0].content[0].type"},
      {R"("messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"input_audio"}]}])",
       "messages[0].content[1].type"},
      {R"("messages":[{"role":"user","content":[{"type":"text"}]}])",
       "messages[0].content[0].text"},
      {R"("messages":[{"role":"user","content":[{"type":"text","text":7}]}])",
       "messages[0].content[0].text"},
      {R"("messages":[{"role":"assistant","content":"x","tool_calls":[{"id":"1"}]}])",
       "messages[0].tool_calls[0].function"},
      {R"("messages":[{"role":"assistant","content":"x","function_call":{"name":"f"}}])",
       "messages[0].function_call"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.extra);
    expect_names(chat_err("{" + c.extra + "}"), c.field);
  }
  expect_names(chat_err(R"({"model":"x"})"), "messages");
}

TEST(OpenAiChat, UnsupportedFeaturesSaySo) {
  ApiError e = chat_err(chat_body(R"("n":3)"));
  EXPECT_EQ(e.message, "'n' must be 1 (only n=1 is supported), got 3");
  EXPECT_EQ(e.param, "n");
  e = chat_err(chat_body(R"("response_format":{"type":"json_schema","json_schema":{"schema":{"not":{}}}})"));
  EXPECT_NE(e.message.find("'not' is not supported"), std::string::npos) << e.message;
  e = chat_err(chat_body(R"("functions":[{"name":"f"}])"));
  EXPECT_NE(e.message.find("not supported"), std::string::npos) << e.message;
  EXPECT_EQ(e.code, "unsupported_parameter");
}

TEST(OpenAiChat, OversizedContentIsRefused) {
  RequestLimits lim;
  lim.max_content_bytes = 10;
  expect_names(chat_err(R"({"messages":[{"role":"user","content":"01234567890"}]})", lim),
               "messages[0].content");
  // Parts count together.
  expect_names(chat_err(R"({"messages":[{"role":"user","content":"ok"},{"role":"user","content":)"
                        R"([{"type":"text","text":"012345"},{"type":"text","text":"67890"}]}]})",
                        lim),
               "messages[1].content");
}

TEST(OpenAiChat, InvalidUtf8NamesTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"messages\":[{\"role\":\"user\",\"content\":\"a\xC3(b\"}]}", "messages[0].content"},
      {"{\"messages\":[{\"role\":\"user\",\"content\":\"ok\"},{\"role\":\"user\",\"content\":"
       "\"\xFF\"}]}",
       "messages[1].content"},
      {"{\"messages\":[{\"role\":\"user\",\"content\":\"\xC0\xAF\"}]}", "messages[0].content"},
      {"{\"messages\":[{\"role\":\"user\",\"content\":\"\xED\xA0\x80\"}]}", "messages[0].content"},
      {"{\"messages\":[{\"role\":\"user\",\"content\":\"\xF4\x90\x80\x80\"}]}",
       "messages[0].content"},
      {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"\xE2\x82\"}]}]"
       "}",
       "messages[0].content[0].text"},
      {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"ok\",\"\x80\"]}",
       "stop[1]"},
      {"{\"model\":\"m\xFE\",\"messages\":[]}", "model"},
  };
  for (const auto& [body, field] : cases) {
    SCOPED_TRACE(field);
    ApiError e = chat_err(body);
    expect_names(e, field);
    EXPECT_NE(e.message.find("UTF-8"), std::string::npos) << e.message;
    EXPECT_TRUE(parses(error_json(e)));  // the error itself is clean JSON
  }
}

TEST(OpenAiChat, DuplicateKeysAreRefused) {
  ApiError e = chat_err(chat_body(R"("temperature":0.1,"temperature":1.9)"));
  expect_names(e, "temperature");
  EXPECT_EQ(e.code, "duplicate_key");
  expect_names(chat_err(R"({"messages":[{"role":"user","role":"system","content":"x"}]})"),
               "messages[0].role");
}

// ---------------------------------------------------------------------------
// Hostile bodies: never a crash, always a 400

std::string nested(size_t depth, const std::string& open, const std::string& close) {
  std::string s;
  s.reserve(depth * (open.size() + close.size()));
  for (size_t i = 0; i < depth; ++i) s += open;
  for (size_t i = 0; i < depth; ++i) s += close;
  return s;
}

TEST(OpenAiHostile, BodiesGive400) {
  const std::string ok_messages = R"("messages":[{"role":"user","content":"hi"}])";
  const std::vector<std::pair<std::string, std::string>> bodies = {
      {"empty", ""},
      {"whitespace", " \r\n\t "},
      {"null", "null"},
      {"array", "[]"},
      {"string", "\"hello\""},
      {"number", "42"},
      {"true", "true"},
      {"open brace", "{"},
      {"close brace", "}"},
      {"unterminated string", R"({"messages":"ab)"},
      {"trailing comma", R"({"messages":[],})"},
      {"trailing garbage", chat_body() + " x"},
      {"two objects", chat_body() + chat_body()},
      {"single quotes", "{'messages':[]}"},
      {"comment", "{/* c */" + ok_messages + "}"},
      {"NaN literal", "{" + ok_messages + ",\"temperature\":NaN}"},
      {"Infinity literal", "{" + ok_messages + ",\"temperature\":Infinity}"},
      {"-Infinity literal", "{" + ok_messages + ",\"temperature\":-Infinity}"},
      {"huge exponent", "{" + ok_messages + ",\"temperature\":1e400}"},
      {"huge mantissa", "{" + ok_messages + ",\"top_p\":" + std::string(5000, '9') + "}"},
      {"hex number", "{" + ok_messages + ",\"max_tokens\":0x10}"},
      {"leading zero", "{" + ok_messages + ",\"max_tokens\":010}"},
      {"10k nested arrays", nested(10000, "[", "]")},
      {"10k nested arrays unclosed", std::string(10000, '[')},
      {"10k nested objects", nested(10000, "{\"a\":", "}")},
      {"deep in a field", "{" + ok_messages + ",\"x\":" + nested(100000, "[", "]") + "}"},
      {"65 levels", "{" + ok_messages + ",\"x\":" + nested(64, "[", "]") + "}"},
      {"invalid UTF-8 in content", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xC3\x28\"}]}"},
      {"invalid UTF-8 in key", "{\"mess\xFF\":1}"},
      {"invalid UTF-8 outside strings", "{\xFF}"},
      {"lone surrogate escape", R"({"messages":[{"role":"user","content":"\ud800"}]})"},
      {"bad escape", R"({"messages":[{"role":"user","content":"\q"}]})"},
      {"raw control character", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\nb\"}]}"},
      {"NUL byte", "{\"messages\":\0[]}"s},
      {"1 MB string content", "{\"messages\":[{\"role\":\"user\",\"content\":\"" +
                                  std::string((1 << 20) + 1, 'a') + "\"}]}"},
      {"1 MB unterminated string", "{\"messages\":\"" + std::string(1 << 20, 'a')},
      {"1 MB key", "{\"" + std::string(1 << 20, 'k') + "\":1}"},
      {"duplicate keys", "{" + ok_messages + "," + ok_messages + "}"},
      {"BOM", "\xEF\xBB\xBF" + chat_body()},
      {"UTF-16 BOM", "\xFF\xFE{}"},
      {"many messages",
       [] {
         std::string b = R"({"messages":[)";
         for (int i = 0; i < 5000; ++i)
           b += std::string(i ? "," : "") + R"({"role":"user","content":""})";
         return b + "]}";
       }()},
      {"many stops", "{" + ok_messages + ",\"stop\":[" +
                         [] {
                           std::string s;
                           for (int i = 0; i < 100000; ++i)
                             s += std::string(i ? "," : "") + "\"s\"";
                           return s;
                         }() +
                         "]}"},
  };
  for (const auto& [name, body] : bodies) {
    SCOPED_TRACE(name);
    ApiError e = chat_err(body);
    EXPECT_EQ(e.status, 400) << e.message;
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_FALSE(e.message.empty());
    EXPECT_LT(e.message.size(), 400u) << "messages stay short";
    EXPECT_TRUE(parses(error_json(e)));
    ApiError c = completion_err(body);
    EXPECT_EQ(c.status, 400) << c.message;
  }
}

TEST(OpenAiHostile, MessagesExplainTheProblem) {
  EXPECT_EQ(chat_err("").message, "request body is not valid JSON: the body is empty");
  EXPECT_NE(chat_err("{").message.find("request body is not valid JSON: "), std::string::npos);
  EXPECT_NE(chat_err(chat_body() + "x").message.find("not valid JSON"), std::string::npos);
  EXPECT_NE(chat_err("[]").message.find("must be a JSON object, got an array"), std::string::npos);
  EXPECT_NE(chat_err("\xEF\xBB\xBF{}").message.find("byte order mark"), std::string::npos);
  EXPECT_NE(chat_err(nested(10000, "[", "]")).message.find("deeper than 64"), std::string::npos);
  EXPECT_EQ(chat_err(nested(10000, "[", "]")).code, "nesting_too_deep");
  // The quote of a long token read before the error is left out.
  ApiError e = chat_err("{\"messages\":\"" + std::string(100000, 'a'));
  EXPECT_LT(e.message.size(), 300u) << e.message;
}

TEST(OpenAiHostile, SixtyFourLevelsAreAllowed) {
  // The body object is level 1, "x" adds 63 arrays: 64 levels in all.
  GenerationRequest r = chat_ok(chat_body("\"x\":" + nested(63, "[", "]")));
  EXPECT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(chat_err(chat_body("\"x\":" + nested(64, "[", "]"))).code, "nesting_too_deep");
}

// A tool call's arguments sent as a string are read as the body is: past
// 64 levels, or with a key twice, they are refused by name. (Deeper than the
// template's reader went, they were rendered as {} without a word.)
TEST(OpenAiHostile, ToolCallArgumentsAreReadAsTheBodyIs) {
  auto with_args = [](const std::string& args) {
    return R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":)" +
           json(args).dump() + "}}]}]}";
  };
  // The arguments object is level 1: 63 arrays inside it make 64 levels.
  GenerationRequest r = chat_ok(with_args(R"({"x":)" + nested(63, "[", "]") + "}"));
  ASSERT_EQ(r.messages.size(), 2u);
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  const ApiError deep = chat_err(with_args(R"({"x":)" + nested(64, "[", "]") + "}"));
  EXPECT_EQ(deep.code, "nesting_too_deep");
  expect_names(deep, "messages[1].tool_calls[0].function.arguments");
  const ApiError twice = chat_err(with_args(R"({"a":1,"a":2})"));
  EXPECT_EQ(twice.code, "duplicate_key");
  expect_names(twice, "messages[1].tool_calls[0].function.arguments");
}

TEST(OpenAiHostile, MegabyteContentAtTheDefaultLimit) {
  const std::string big(1 << 20, 'z');
  GenerationRequest r = chat_ok(R"({"messages":[{"role":"user","content":")" + big + "\"}]}");
  EXPECT_EQ(r.messages[0].content.size(), size_t{1} << 20);
  expect_names(chat_err(R"({"messages":[{"role":"user","content":")" + big + "z\"}]}"),
               "messages[0].content");
}

// Random mutations of valid bodies: whatever comes out is a request or a 400.
TEST(OpenAiHostile, MutatedBodiesNeverCrash) {
  const std::vector<std::string> seeds = {
      chat_body(R"("temperature":0.7,"stop":["a","b"],"seed":-1,"stream":true,)"
                R"("stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":3)"),
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"x\u00e9"}]}],"max_tokens":5})",
      completion_body(R"("logprobs":2,"echo":false,"best_of":1,"suffix":"","max_tokens":1e3)"),
      R"({"prompt":[[1,2,3]],"top_k":3})",
  };
  std::mt19937 rng(1234);
  const char alphabet[] = "{}[]\",:0123456789.eE+-truefalsnl \\u\xC3\xFF\x80";
  RequestLimits lim;
  lim.n_vocab = 100;
  int accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string b = seeds[static_cast<size_t>(iter) % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits && !b.empty(); ++k) {
      const size_t at = rng() % b.size();
      switch (rng() % 3) {
        case 0:
          b[at] = alphabet[rng() % (sizeof alphabet - 1)];
          break;
        case 1:
          b.erase(at, 1 + rng() % 3);
          break;
        default:
          b.insert(at, 1, alphabet[rng() % (sizeof alphabet - 1)]);
      }
    }
    for (bool chat : {true, false}) {
      ParsedRequest r = chat ? parse_chat_request(b, lim) : parse_completion_request(b, lim);
      if (const auto* e = std::get_if<ApiError>(&r)) {
        ASSERT_EQ(e->status, 400) << b;
        ASSERT_TRUE(parses(error_json(*e)));
      } else {
        const GenerationRequest& q = std::get<GenerationRequest>(r);
        ++accepted;
        ASSERT_TRUE(q.sampling.validate().ok()) << b;
        ASSERT_TRUE(q.max_tokens == -1 || q.max_tokens >= 1) << b;
        ASSERT_LE(q.stop.size(), 16u);
        ASSERT_GE(q.top_logprobs, -1);
        ASSERT_LE(q.top_logprobs, 20);
        if (chat) {
          ASSERT_FALSE(q.messages.empty()) << b;
        } else {
          ASSERT_TRUE(!q.prompt.empty() || !q.prompt_tokens.empty()) << b;
        }
        for (int32_t t : q.prompt_tokens) ASSERT_TRUE(t >= 0 && t < 100) << b;
      }
    }
  }
  EXPECT_GT(accepted, 100);  // the mutations do not only produce garbage
}

// ---------------------------------------------------------------------------
// Completions requests

TEST(OpenAiCompletion, StringPrompt) {
  GenerationRequest r = completion_ok(completion_body());
  EXPECT_FALSE(r.chat);
  EXPECT_EQ(r.prompt, "Once upon a time");
  EXPECT_TRUE(r.prompt_tokens.empty());
  EXPECT_TRUE(r.messages.empty());
  EXPECT_EQ(r.top_logprobs, -1);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
}

TEST(OpenAiCompletion, PromptForms) {
  EXPECT_EQ(completion_ok(R"({"prompt":["one"]})").prompt, "one");
  EXPECT_EQ(completion_ok(R"({"prompt":[1,2,3]})").prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(completion_ok(R"({"prompt":[[7,0]]})").prompt_tokens, (std::vector<int32_t>{7, 0}));
  EXPECT_EQ(completion_ok(R"({"prompt":[2147483647]})").prompt_tokens,
            (std::vector<int32_t>{INT32_MAX}));
  RequestLimits lim;
  lim.n_vocab = 10;
  EXPECT_EQ(completion_ok(R"({"prompt":[9, 0]})", lim).prompt_tokens.size(), 2u);
}

TEST(OpenAiCompletion, EveryAcceptedField) {
  GenerationRequest r = completion_ok(completion_body(
      R"("model":"m","max_tokens":16,"temperature":0,"top_p":0.5,"top_k":5,"min_p":0.1,)"
      R"("presence_penalty":1,"frequency_penalty":1,"repeat_penalty":1.3,"seed":7,"stop":"\n",)"
      R"("n":1,"stream":true,"stream_options":{"include_usage":false},"logprobs":3,)"
      R"("echo":false,"best_of":1,"suffix":"","user":"u","ignore_eos":true,"unknown":[{}])"));
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(r.sampling.repeat_penalty, 1.3f);
  EXPECT_EQ(r.sampling.seed, 7u);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n"}));
  EXPECT_TRUE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_EQ(completion_ok(completion_body(R"("logprobs":0)")).top_logprobs, 0);
  EXPECT_EQ(completion_ok(completion_body(R"("logprobs":null)")).top_logprobs, -1);
}

TEST(OpenAiCompletion, BadFieldsAreNamed) {
  const std::vector<BadCase> cases = {
      {R"("logprobs":true)", "logprobs"},
      {R"("logprobs":21)", "logprobs"},
      {R"("logprobs":-1)", "logprobs"},
      {R"("echo":true)", "echo"},
      {R"("echo":"no")", "echo"},
      {R"("best_of":2)", "best_of"},
      {R"("best_of":0)", "best_of"},
      {R"("best_of":"1")", "best_of"},
      {R"("suffix":"end")", "suffix"},
      {R"("suffix":1)", "suffix"},
      {R"("temperature":5)", "temperature"},
      {R"("max_tokens":0)", "max_tokens"},
      {R"("n":2)", "n"},
      {R"("stop":[""])", "stop[0]"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.extra);
    expect_names(completion_err(completion_body(c.extra)), c.field);
  }
}

TEST(OpenAiCompletion, BadPromptsAreNamed) {
  RequestLimits lim;
  lim.n_vocab = 100;
  lim.max_content_bytes = 8;
  const std::vector<BadCase> cases = {
      {R"({})", "prompt"},
      {R"({"prompt":null})", "prompt"},
      {R"({"prompt":""})", "prompt"},
      {R"({"prompt":[]})", "prompt"},
      {R"({"prompt":[""]})", "prompt[0]"},
      {R"({"prompt":[[]]})", "prompt[0]"},
      {R"({"prompt":5})", "prompt"},
      {R"({"prompt":{"text":"x"}})", "prompt"},
      {R"({"prompt":["a","b"]})", "prompt"},
      {R"({"prompt":[[1],[2]]})", "prompt"},
      {R"({"prompt":[1,"a"]})", "prompt[1]"},
      {R"({"prompt":[1,2.5]})", "prompt[1]"},
      {R"({"prompt":[1,-1]})", "prompt[1]"},
      {R"({"prompt":[1,100]})", "prompt[1]"},
      {R"({"prompt":[1,1e400]})", "prompt[1]"},
      {R"({"prompt":[[1,2,100]]})", "prompt[0][2]"},
      {R"({"prompt":"123456789"})", "prompt"},
      {R"({"prompt":["123456789"]})", "prompt[0]"},
      {R"({"prompt":[1,2,3,4,5,6,7,8,9]})", "prompt"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.extra);
    expect_names(completion_err(c.extra, lim), c.field);
  }
  // Without a vocabulary, ids must still fit in int32.
  expect_names(completion_err(R"({"prompt":[2147483648]})"), "prompt[0]");
}

TEST(OpenAiCompletion, ChatAndCompletionFieldsDoNotMix) {
  // A chat body has no prompt; a completions body has no messages.
  expect_names(completion_err(chat_body()), "prompt");
  expect_names(chat_err(completion_body()), "messages");
}

// /tokenize and /detokenize read their bodies as the other routes do: a
// byte order mark, nesting past kMaxJsonDepth and a key given twice are each
// refused with the same 400 as for a chat request.
TEST(OpenAiTokenize, BodiesAreReadLikeTheOtherRoutes) {
  const std::string deep = nested(kMaxJsonDepth + 1, "[", "]");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"\xEF\xBB\xBF{\"content\":\"hi\"}", "\xEF\xBB\xBF{\"tokens\":[1]}"},
      {"{\"content\":\"hi\",\"x\":" + deep + "}", "{\"tokens\":[1],\"x\":" + deep + "}"},
      {R"({"content":"hi","content":"ho"})", R"({"tokens":[1],"tokens":[2]})"},
  };
  const std::vector<std::string> codes = {"", "nesting_too_deep", "duplicate_key"};
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& [tok_body, detok_body] = cases[i];
    SCOPED_TRACE(codes[i]);
    auto t = parse_tokenize_request(tok_body);
    ASSERT_TRUE(std::holds_alternative<ApiError>(t));
    const ApiError& te = std::get<ApiError>(t);
    auto d = parse_detokenize_request(detok_body, 100);
    ASSERT_TRUE(std::holds_alternative<ApiError>(d));
    const ApiError& de = std::get<ApiError>(d);
    const ApiError ce = chat_err(i == 0   ? "\xEF\xBB\xBF" + chat_body()
                                 : i == 1 ? chat_body("\"x\":" + deep)
                                          : chat_body("\"model\":\"a\",\"model\":\"b\""));
    for (const ApiError* e : {&te, &de}) {
      EXPECT_EQ(e->status, 400);
      EXPECT_EQ(e->code, ce.code) << e->message;
      if (!codes[i].empty()) {
        EXPECT_EQ(e->code, codes[i]);
      }
    }
    if (i == 0) {
      EXPECT_NE(te.message.find("byte order mark"), std::string::npos) << te.message;
      EXPECT_NE(de.message.find("byte order mark"), std::string::npos) << de.message;
    }
  }
}

TEST(OpenAiTokenize, WellFormedBodies) {
  auto t = parse_tokenize_request(R"({"content":"the hat","add_special":true,"with_pieces":null})");
  ASSERT_TRUE(std::holds_alternative<TokenizeRequest>(t));
  const TokenizeRequest& r = std::get<TokenizeRequest>(t);
  EXPECT_EQ(r.content, "the hat");
  EXPECT_TRUE(r.add_special);
  EXPECT_TRUE(r.parse_special);
  EXPECT_FALSE(r.with_pieces);
  for (const char* body : {"{}", R"({"content":3})", R"({"content":null})", "[]"}) {
    auto bad = parse_tokenize_request(body);
    ASSERT_TRUE(std::holds_alternative<ApiError>(bad)) << body;
    EXPECT_EQ(std::get<ApiError>(bad).status, 400) << body;
  }

  auto d = parse_detokenize_request(R"({"tokens":[0,5,99]})", 100);
  ASSERT_TRUE(std::holds_alternative<std::vector<int32_t>>(d));
  EXPECT_EQ(std::get<std::vector<int32_t>>(d), (std::vector<int32_t>{0, 5, 99}));
  for (const char* body : {R"({"tokens":[100]})", R"({"tokens":[-1]})", R"({"tokens":[1.5]})",
                           R"({"tokens":["1"]})", R"({"tokens":[1e30]})"}) {
    auto bad = parse_detokenize_request(body, 100);
    ASSERT_TRUE(std::holds_alternative<ApiError>(bad)) << body;
    EXPECT_EQ(std::get<ApiError>(bad).code, "invalid_token") << body;
  }
  auto none = parse_detokenize_request(R"({"tokens":{}})", 100);
  ASSERT_TRUE(std::holds_alternative<ApiError>(none));
  EXPECT_EQ(std::get<ApiError>(none).param, "tokens");
}

// ---------------------------------------------------------------------------
// Responses

TEST(OpenAiResponse, ChatCompletionShape) {
  Usage u{12, 5, 0};
  json j = json::parse(chat_completion_json("chatcmpl-1", 1700000000, "m", "Hello!", "stop", u));
  EXPECT_EQ(j["id"], "chatcmpl-1");
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "m");
  ASSERT_EQ(j["choices"].size(), 1u);
  const json& c = j["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["message"], json({{"role", "assistant"}, {"content", "Hello!"}}));
  EXPECT_TRUE(c.at("logprobs").is_null());
  EXPECT_EQ(c["finish_reason"], "stop");
  EXPECT_EQ(j["usage"],
            json({{"prompt_tokens", 12},
                  {"completion_tokens", 5},
                  {"total_tokens", 17},
                  {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
  EXPECT_FALSE(j.contains("edgelm"));
}

TEST(OpenAiResponse, DroppedPromptTokensAreReported) {
  Usage u{100, 1, 40};
  json j = json::parse(chat_completion_json("id", 1, "m", "x", "length", u));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["edgelm"], json({{"prompt_tokens_dropped", 40}}));
  j = json::parse(completion_json("id", 1, "m", "x", "stop", u));
  EXPECT_EQ(j["edgelm"]["prompt_tokens_dropped"], 40);
  j = json::parse(usage_chunk_json("id", 1, "m", u, true));
  EXPECT_EQ(j["edgelm"]["prompt_tokens_dropped"], 40);
}

TEST(OpenAiResponse, FieldOrderFollowsOpenAi) {
  const std::string s = chat_completion_json("id", 1, "m", "x", "stop", Usage{1, 1});
  EXPECT_EQ(
      s.rfind(R"({"id":"id","object":"chat.completion","created":1,"model":"m","choices":)", 0), 0u)
      << s;
}

TEST(OpenAiResponse, ChatLogprobsShape) {
  std::vector<TokenLogprobOut> lp = {
      {"Hi", -0.25f, {{"Hi", -0.25f}, {"Hello", -1.5f}}},
      {"\xE2\x82", -INFINITY, {}},  // the first two bytes of a 3-byte character
  };
  json j = json::parse(chat_completion_json("id", 1, "m", "Hi", "stop", Usage{1, 2}, &lp));
  const json& l = j["choices"][0]["logprobs"];
  ASSERT_TRUE(l.is_object());
  EXPECT_TRUE(l.at("refusal").is_null());
  const json& c = l["content"];
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0]["token"], "Hi");
  EXPECT_EQ(c[0]["logprob"], -0.25);
  EXPECT_EQ(c[0]["bytes"], json({72, 105}));
  ASSERT_EQ(c[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(c[0]["top_logprobs"][1],
            json({{"token", "Hello"}, {"logprob", -1.5}, {"bytes", {72, 101, 108, 108, 111}}}));
  EXPECT_EQ(c[1]["token"], "\xEF\xBF\xBD");
  EXPECT_EQ(c[1]["bytes"], json({0xE2, 0x82}));
  EXPECT_EQ(c[1]["logprob"], -9999.0);  // -inf is not JSON
  EXPECT_EQ(c[1]["top_logprobs"], json::array());
}

TEST(OpenAiResponse, LogprobsPrintShortestFloat) {
  std::vector<TokenLogprobOut> lp = {{"a", -0.1f, {}}};
  const std::string s = chat_chunk_json("id", 1, "m", "a", false, "", &lp);
  EXPECT_NE(s.find("\"logprob\":-0.1,"), std::string::npos) << s;
  lp[0].logprob = NAN;
  EXPECT_NE(chat_chunk_json("id", 1, "m", "a", false, "", &lp).find("\"logprob\":-9999.0"),
            std::string::npos);
}

TEST(OpenAiResponse, ChatChunkShapes) {
  json first = json::parse(chat_chunk_json("c", 2, "m", "", true, ""));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["id"], "c");
  EXPECT_EQ(first["created"], 2);
  EXPECT_FALSE(first.contains("usage"));
  const json& c0 = first["choices"][0];
  EXPECT_EQ(c0["index"], 0);
  EXPECT_EQ(c0["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(c0.at("finish_reason").is_null());
  EXPECT_TRUE(c0.at("logprobs").is_null());

  json mid = json::parse(chat_chunk_json("c", 2, "m", "lo", false, ""));
  EXPECT_EQ(mid["choices"][0]["delta"], json({{"content", "lo"}}));

  json last = json::parse(chat_chunk_json("c", 2, "m", "", false, "stop"));
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");

  json both = json::parse(chat_chunk_json("c", 2, "m", "!", false, "length"));
  EXPECT_EQ(both["choices"][0]["delta"], json({{"content", "!"}}));
  EXPECT_EQ(both["choices"][0]["finish_reason"], "length");

  std::vector<TokenLogprobOut> lp = {{"lo", -0.5f, {}}};
  json withlp = json::parse(chat_chunk_json("c", 2, "m", "lo", false, "", &lp));
  EXPECT_EQ(withlp["choices"][0]["logprobs"]["content"][0]["token"], "lo");
}

TEST(OpenAiResponse, UsageChunkShape) {
  json c = json::parse(usage_chunk_json("c", 3, "m", Usage{7, 9}, true));
  EXPECT_EQ(c["object"], "chat.completion.chunk");
  EXPECT_EQ(c["choices"], json::array());
  EXPECT_EQ(c["usage"],
            json({{"prompt_tokens", 7},
                  {"completion_tokens", 9},
                  {"total_tokens", 16},
                  {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
  EXPECT_FALSE(c.contains("edgelm"));
  json t = json::parse(usage_chunk_json("c", 3, "m", Usage{7, 9}, false));
  EXPECT_EQ(t["object"], "text_completion");
  EXPECT_EQ(t["usage"]["total_tokens"], 16);
}

TEST(OpenAiResponse, UsageTotalDoesNotOverflow) {
  json j = json::parse(usage_chunk_json("c", 3, "m", Usage{INT_MAX, INT_MAX}, true));
  EXPECT_EQ(j["usage"]["total_tokens"].get<int64_t>(), int64_t{INT_MAX} * 2);
}

TEST(OpenAiResponse, CompletionShape) {
  json j = json::parse(completion_json("cmpl-9", 5, "m", " there", "length", Usage{3, 2}));
  EXPECT_EQ(j["id"], "cmpl-9");
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["created"], 5);
  EXPECT_EQ(j["model"], "m");
  const json& c = j["choices"][0];
  EXPECT_EQ(c["text"], " there");
  EXPECT_EQ(c["index"], 0);
  EXPECT_TRUE(c.at("logprobs").is_null());
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["total_tokens"], 5);

  json chunk = json::parse(completion_chunk_json("cmpl-9", 5, "m", " the", ""));
  EXPECT_EQ(chunk["object"], "text_completion");
  EXPECT_EQ(chunk["choices"][0]["text"], " the");
  EXPECT_TRUE(chunk["choices"][0].at("finish_reason").is_null());
  EXPECT_FALSE(chunk.contains("usage"));
}

TEST(OpenAiResponse, CompletionLogprobsShape) {
  std::vector<TokenLogprobOut> lp = {
      {" the", -0.5f, {{" the", -0.5f}, {" a", -1.0f}, {" a", -2.0f}}},
      {"re", -0.25f, {{"re", -0.25f}}},
      {"\xFF", -1.0f, {}},
  };
  json j = json::parse(completion_json("id", 1, "m", " there\xFF", "stop", Usage{1, 3}, &lp));
  const json& l = j["choices"][0]["logprobs"];
  EXPECT_EQ(l["tokens"], json({" the", "re", "\xEF\xBF\xBD"}));
  EXPECT_EQ(l["token_logprobs"], json({-0.5, -0.25, -1.0}));
  ASSERT_EQ(l["top_logprobs"].size(), 3u);
  EXPECT_EQ(l["top_logprobs"][0], json({{" the", -0.5}, {" a", -1.0}}));  // first " a" kept
  EXPECT_EQ(l["top_logprobs"][2], json::object());
  EXPECT_EQ(l["text_offset"], json({0, 4, 6}));
  EXPECT_EQ(j["choices"][0]["text"], " there\xEF\xBF\xBD");

  json c = json::parse(completion_chunk_json("id", 1, "m", "re", "", &lp, 100));
  EXPECT_EQ(c["choices"][0]["logprobs"]["text_offset"], json({100, 104, 106}));
}

TEST(OpenAiResponse, InvalidUtf8FromTheModelIsReplaced) {
  const std::string bad = "ok \xE2\x82 \xFF end";
  for (const std::string& s :
       {chat_completion_json("id", 1, "m\xC0", bad, "stop", Usage{}),
        chat_chunk_json("id", 1, "m", bad, true, ""),
        completion_json("id", 1, "m", bad, "", Usage{}),
        completion_chunk_json("id\xFE", 1, "m", bad, "stop"), models_json("m\xFF", 0, "o")}) {
    EXPECT_TRUE(parses(s)) << s;  // nlohmann refuses invalid UTF-8
    EXPECT_EQ(s.find('\n'), std::string::npos);
  }
  json j = json::parse(chat_chunk_json("id", 1, "m", bad, false, ""));
  EXPECT_EQ(j["choices"][0]["delta"]["content"], "ok \xEF\xBF\xBD \xEF\xBF\xBD end");
}

TEST(OpenAiResponse, ModelsShape) {
  json j = json::parse(models_json("qwen2-1.5b", 1700000000, "edgelm"));
  EXPECT_EQ(j.size(), 2u);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  const json& m = j["data"][0];
  EXPECT_EQ(m.size(), 4u);
  EXPECT_EQ(m["id"], "qwen2-1.5b");
  EXPECT_EQ(m["object"], "model");
  EXPECT_EQ(m["created"], 1700000000);
  EXPECT_EQ(m["owned_by"], "edgelm");
}

TEST(OpenAiResponse, SseFraming) {
  const std::string chunk = chat_chunk_json("c", 1, "m", "a\n\nb", false, "");
  const std::string ev = sse_event(chunk);
  EXPECT_EQ(ev, "data: " + chunk + "\n\n");
  EXPECT_EQ(ev.find("\n\n"), ev.size() - 2);  // the content's newlines are escaped
  EXPECT_EQ(std::string(sse_done()), "data: [DONE]\n\n");
  // Text with line breaks cannot end the event early.
  EXPECT_EQ(sse_event("a\nb\r\nc\rd"), "data: a\ndata: b\ndata: c\ndata: d\n\n");
  EXPECT_EQ(sse_event(""), "data: \n\n");
}

TEST(OpenAiUtf8, ReplacesMaximalIllFormedSubparts) {
  EXPECT_EQ(valid_utf8("plain ascii"), "plain ascii");
  EXPECT_EQ(valid_utf8("\xF0\x9F\x98\x80 \xE4\xB8\xAD \xC3\xA9"),
            "\xF0\x9F\x98\x80 \xE4\xB8\xAD \xC3\xA9");
  EXPECT_EQ(valid_utf8(std::string("a\0b", 3)), std::string("a\0b", 3));
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(valid_utf8("\xE2\x82"), r);            // truncated 3-byte sequence: one
  EXPECT_EQ(valid_utf8("\xE2\x82\x41"), r + "A");  // cut short by ASCII
  EXPECT_EQ(valid_utf8("\xF0\x9F\x98"), r);
  EXPECT_EQ(valid_utf8("\xC0\xAF"), r + r);                  // overlong: both bytes invalid
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), r + r + r);          // UTF-8 encoded surrogate
  EXPECT_EQ(valid_utf8("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(valid_utf8("\x80\xBF"), r + r);                  // lone continuation bytes
  EXPECT_EQ(valid_utf8("\xFF"), r);
  EXPECT_EQ(valid_utf8("\xF4\x8F\xBF\xBF"), "\xF4\x8F\xBF\xBF");  // U+10FFFF itself
}

}  // namespace
}  // namespace edgelm::serve
