#include "loadgen/response_parse.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include "loadgen/request_body.h"

namespace edgelm::loadgen {
namespace {

using Kind = ChunkInfo::Kind;

TEST(ResponseParse, ChatDeltaAndCompletionText) {
  auto c = parse_chunk(R"({"choices":[{"index":0,"delta":{"content":"Hello"}}]})");
  EXPECT_EQ(c.kind, Kind::Data);
  EXPECT_EQ(c.content_bytes, 5u);
  EXPECT_EQ(c.completion_tokens, -1);
  c = parse_chunk(R"({"choices":[{"index":0,"text":"ab","finish_reason":null}]})");
  EXPECT_EQ(c.content_bytes, 2u);
  // A role-only first chunk and a finish chunk carry no content.
  EXPECT_EQ(
      parse_chunk(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})").content_bytes,
      0u);
  EXPECT_EQ(parse_chunk(R"({"choices":[{"delta":{},"finish_reason":"length"}]})").content_bytes,
            0u);
  EXPECT_EQ(parse_chunk(R"({"choices":[{"delta":{"content":null}}]})").content_bytes, 0u);
}

TEST(ResponseParse, UsageChunkAndDone) {
  auto c = parse_chunk(
      R"({"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":32,"total_tokens":41}})");
  EXPECT_EQ(c.kind, Kind::Data);
  EXPECT_EQ(c.completion_tokens, 32);
  EXPECT_EQ(parse_chunk("[DONE]").kind, Kind::Done);
  EXPECT_EQ(parse_chunk(" [DONE]").kind, Kind::Done);
}

TEST(ResponseParse, ErrorsAndGarbage) {
  auto c =
      parse_chunk(R"({"error":{"message":"x","type":"server_error","code":"internal_error"}})");
  EXPECT_EQ(c.kind, Kind::Error);
  EXPECT_EQ(c.error_code, "internal_error");
  EXPECT_EQ(parse_chunk("{not json").kind, Kind::Invalid);
  EXPECT_EQ(parse_chunk("[1,2]").kind, Kind::Invalid);
  EXPECT_EQ(parse_chunk("").kind, Kind::Invalid);
}

TEST(ResponseParse, ErrorCodeOfBodies) {
  EXPECT_EQ(
      error_code_of(R"({"error":{"message":"busy","type":"rate_limit_exceeded","code":"slots"}})"),
      "slots");
  EXPECT_EQ(error_code_of(R"({"error":{"message":"m","type":"unavailable_error","code":503}})"),
            "503");
  EXPECT_EQ(
      error_code_of(R"({"error":{"message":"m","type":"invalid_request_error","code":null}})"),
      "invalid_request_error");
  EXPECT_EQ(error_code_of(R"({"error":{}})"), "error");
  EXPECT_EQ(error_code_of(R"({"error":"Model is loading"})"), "Model is loading");
  EXPECT_EQ(error_code_of(R"({"ok":true})"), "");
  EXPECT_EQ(error_code_of("<html>502 Bad Gateway</html>"), "");
}

TEST(ResponseParse, NonStreamedBodies) {
  auto b = parse_body(
      "   \n {\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"abc\"}}],"
      "\"usage\":{\"completion_tokens\":3}}");
  EXPECT_TRUE(b.json);
  EXPECT_EQ(b.content_bytes, 3u);
  EXPECT_EQ(b.completion_tokens, 3);
  EXPECT_TRUE(b.error_code.empty());
  EXPECT_FALSE(parse_body("").json);
}

TEST(RequestBody, PromptLengthAndBodies) {
  const std::string p = make_prompt(100, 1);
  EXPECT_NEAR(static_cast<double>(p.size()) / 100.0, 4.0, 0.05);  // ~4 characters a token
  EXPECT_EQ(p, make_prompt(100, 1));
  EXPECT_NE(p, make_prompt(100, 2));
  auto j = nlohmann::json::parse(make_body({.chat = true, .stream = true, .max_tokens = 9}, "hi"));
  EXPECT_EQ(j["messages"][0]["content"], "hi");
  EXPECT_EQ(j["max_tokens"], 9);
  EXPECT_EQ(j["ignore_eos"], true);
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["stream_options"]["include_usage"], true);
  EXPECT_FALSE(j.contains("model"));
  j = nlohmann::json::parse(make_body({.max_tokens = 5, .model = "m"}, "x"));
  EXPECT_EQ(j["prompt"], "x");
  EXPECT_EQ(j["model"], "m");
  EXPECT_FALSE(j.contains("stream"));
}

}  // namespace
}  // namespace edgelm::loadgen
