// Tools end to end inside the process: the constraint that forces a call
// (noise weights still write valid calls), the request rendered through real
// templates exactly as python3-jinja2 renders it, and the live server's
// answers (tool_calls, streamed delta.tool_calls, refusals that name why).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "constrain/framed_constraint.h"
#include "engine/engine_test_util.h"
#include "serve/chat_answer.h"
#include "serve/chat_output.h"
#include "serve/json_schema.h"
#include "server_fixture.h"
#include "testutil.h"

namespace edgelm::serve {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

std::shared_ptr<const constrain::Schema> schema_of(const char* text) {
  const CompiledSchema c = compile_json_schema(ojson::parse(text));
  EXPECT_TRUE(c.schema) << c.message;
  return c.schema;
}

constexpr const char* kWeatherParams =
    R"({"type":"object","properties":{"city":{"type":"string","maxLength":12},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city"]})";
constexpr const char* kTimeParams =
    R"({"type":"object","properties":{"zone":{"enum":["UTC","CET"]}},"required":["zone"]})";

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

fs::path template_path(const std::string& name) {
  return fs::path(EDGELM_SOURCE_DIR) / "assets" / "templates" / name;
}

// ---------------------------------------------------------------------------
// The constraint

TEST(FramedConstraint, StepsThroughPrefixValueSuffix) {
  const std::string path = test::synth_model("tiny-llama", "Q8_0");
  auto e = test::make_engine(path, 1, 128, 1);
  ASSERT_TRUE(e);
  auto vocab = std::make_shared<const constrain::TokenVocab>(e->tokenizer());
  const CallFrame w = call_frame(ToolFormat::Hermes, "get_weather");
  const CallFrame t = call_frame(ToolFormat::Hermes, "get_time");
  auto c = constrain::FramedConstraint::make(
      {{w.prefix, schema_of(kWeatherParams)}, {t.prefix, schema_of(kTimeParams)}}, w.suffix,
      w.joiner, 2, vocab);
  ASSERT_TRUE(c.ok()) << c.message();
  constrain::FramedConstraint& fc = **c;
  // The shortest output: the shorter prefix, {"zone":"UTC"}, the suffix.
  EXPECT_EQ(fc.min_tokens(),
            static_cast<int>(t.prefix.size() + std::string(R"({"zone":"UTC"})").size() +
                             t.suffix.size()));
  EXPECT_FALSE(fc.complete());
  EXPECT_FALSE(fc.advance("<tool_call>\n{\"name\": \"get_date\""));  // not a function offered
  auto c2 = constrain::FramedConstraint::make(
      {{w.prefix, schema_of(kWeatherParams)}, {t.prefix, schema_of(kTimeParams)}}, w.suffix,
      w.joiner, 2, vocab);
  constrain::FramedConstraint& f2 = **c2;
  ASSERT_TRUE(f2.advance(
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>"));
  EXPECT_TRUE(f2.complete());
  EXPECT_FALSE(f2.done());  // a second call may follow
  EXPECT_FALSE(f2.advance(
      "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\": 2}"));  // city is
                                                                                    // required
  // A prefix that starts another is refused (the alternatives could not be told apart).
  EXPECT_FALSE(
      constrain::FramedConstraint::make(
          {{"ab", schema_of(kTimeParams)}, {"abc", schema_of(kTimeParams)}}, "", "", 1, vocab)
          .ok());
}

// Noise weights under the constraint: every answer is whole calls that the
// parser reads back, arguments within the schema, well within max_tokens.
void noise_calls(ToolFormat format, int max_frames, int answers) {
  const std::string path = test::synth_model("tiny-llama", "Q8_0");
  auto e = test::make_engine(path, 2, 512, 1);
  ASSERT_TRUE(e);
  auto vocab = std::make_shared<const constrain::TokenVocab>(e->tokenizer());
  ASSERT_TRUE(vocab->has_all_bytes());
  const std::vector<int32_t> prompt = e->tokenizer().encode("Call a tool:", true, false);
  int calls = 0;
  for (int i = 0; i < answers; ++i) {
    const CallFrame w = call_frame(format, "get_weather");
    const CallFrame t = call_frame(format, "get_time");
    auto c = constrain::FramedConstraint::make(
        {{w.prefix, schema_of(kWeatherParams)}, {t.prefix, schema_of(kTimeParams)}}, w.suffix,
        w.joiner, std::min(max_frames, w.max_calls), vocab);
    ASSERT_TRUE(c.ok());
    GenerateParams p;
    p.sampling.temperature = 1.0f;
    p.sampling.top_k = 0;
    p.sampling.top_p = 1.0f;
    p.sampling.min_p = 0.0f;
    p.sampling.seed = static_cast<uint64_t>(i + 1);
    p.max_tokens = 400;
    p.constraint = std::shared_ptr<TokenConstraint>(std::move(c).value());
    Finish fin = Finish::None;
    const std::vector<int32_t> out = test::generate(*e, prompt, p, &fin);
    std::string text;
    for (int32_t tok : out) text += vocab->piece(tok);
    EXPECT_EQ(fin, Finish::Stop) << text;
    EXPECT_LT(out.size(), 400u) << text;
    OutputOptions o;
    o.format = format;
    o.tool_names = {"get_weather", "get_time"};
    ChatOutput parser(o);
    std::vector<ChatDelta> ds;
    parser.push(text, ds);
    parser.finish(ds);
    const AssistantOut a = join_deltas(ds);
    EXPECT_EQ(a.content, "") << text;
    ASSERT_GE(a.tool_calls.size(), 1u) << text;
    EXPECT_LE(a.tool_calls.size(), static_cast<size_t>(max_frames)) << text;
    for (const ParsedToolCall& call : a.tool_calls) {
      const json args = json::parse(call.arguments);
      if (call.name == "get_weather") {
        ASSERT_TRUE(args.contains("city")) << text;
        EXPECT_LE(args["city"].get<std::string>().size(), 12u * 4);
        if (args.contains("days")) {
          EXPECT_TRUE(args["days"] >= 1 && args["days"] <= 7) << text;
        }
      } else {
        EXPECT_TRUE(args["zone"] == "UTC" || args["zone"] == "CET") << text;
      }
    }
    calls += static_cast<int>(a.tool_calls.size());
  }
  EXPECT_GE(calls, answers);
}

TEST(FramedConstraint, NoiseModelWritesValidHermesCalls) {
  noise_calls(ToolFormat::Hermes, 3, 8);
}
TEST(FramedConstraint, NoiseModelWritesOneValidLlama3Call) {
  noise_calls(ToolFormat::Llama3, 1, 6);
}

// ---------------------------------------------------------------------------
// Rendering through real templates, against python3-jinja2

// A chat request in OpenAI's wire form: arguments as JSON strings, content
// null beside tool calls, a tool result.
const char* kToolConversation = R"({
 "messages": [
  {"role": "system", "content": "You are a helpful assistant."},
  {"role": "user", "content": "What's the weather in Paris, and the time in Oslo?"},
  {"role": "assistant", "content": null, "tool_calls": [
    {"id": "call_a1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 1}"}},
    {"id": "call_b2", "type": "function", "function": {"name": "get_time", "arguments": "{\"zone\": \"CET\"}"}}]},
  {"role": "tool", "tool_call_id": "call_a1", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"},
  {"role": "tool", "tool_call_id": "call_b2", "content": "14:05"},
  {"role": "assistant", "content": "Clear and 21 °C in Paris; it is 14:05 in Oslo."},
  {"role": "user", "content": "And tomorrow?"}
 ],
 "tools": [
  {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
   "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
   "days": {"type": "integer"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "get_time", "description": "Local time.",
   "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}
 ]
})";

// What the template is given for that request, built the way Hugging Face
// users build it: the same JSON with each call's arguments parsed into an
// object and null content as "".
ojson python_context(const ojson& body, const std::string& bos, const std::string& eos,
                     bool with_tools) {
  ojson ctx = ojson::object();
  ojson msgs = body["messages"];
  for (auto& m : msgs) {
    if (m.contains("content") && m["content"].is_null()) m["content"] = "";
    if (m.contains("tool_calls"))
      for (auto& c : m["tool_calls"])
        c["function"]["arguments"] = ojson::parse(c["function"]["arguments"].get<std::string>());
  }
  if (body.contains("chat_template_kwargs"))
    for (auto& [k, v] : body["chat_template_kwargs"].items()) ctx[k] = v;
  ctx["messages"] = msgs;
  ctx["tools"] = with_tools && body.contains("tools") ? body["tools"] : ojson(nullptr);
  ctx["add_generation_prompt"] = true;
  ctx["bos_token"] = bos;
  ctx["eos_token"] = eos;
  return ctx;
}

bool have_jinja2() {
  return std::system("/usr/bin/python3 -c 'import jinja2' >/dev/null 2>&1") == 0;
}

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

TEST(ToolRendering, RealTemplatesRenderRequestsAsJinja2Does) {
  if (!have_jinja2()) GTEST_SKIP() << "python3-jinja2 is not installed";
  const std::vector<std::string> names = {"Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen-Qwen3-0.6B.jinja",
                                          "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
                                          "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
                                          "Qwen-QwQ-32B.jinja"};
  // Llama 3.x templates take one call a turn: their conversation has one.
  const std::vector<std::string> llama = {"meta-llama-Llama-3.1-8B-Instruct.jinja",
                                          "meta-llama-Llama-3.2-3B-Instruct.jinja",
                                          "meta-llama-Llama-3.3-70B-Instruct.jinja"};
  if (!fs::exists(template_path(names[0])))
    GTEST_SKIP() << "assets/templates/ not fetched (scripts/fetch-test-assets.sh)";
  auto file = gguf::File::open(test::tiny_model_path());
  ASSERT_TRUE(file.ok());
  auto tok = tokenizer::Tokenizer::from_gguf(*file);
  ASSERT_TRUE(tok.ok());
  const std::string bos(tok->text(tok->bos())), eos(tok->text(tok->eos()));

  ojson full = ojson::parse(kToolConversation);
  ojson single = full;
  single["messages"][2]["tool_calls"].erase(1);
  single["messages"].erase(4);
  ojson thinking = full;  // Qwen3's switch, and an earlier turn's reasoning
  thinking["chat_template_kwargs"] = {{"enable_thinking", false}};
  thinking["messages"][5]["reasoning_content"] = "Both answers are in.";
  ojson no_tools = full;
  no_tools["tool_choice"] = "none";  // the tools are not shown; the earlier calls are

  struct Case {
    std::string name;
    ojson body;
    bool with_tools;
  };
  int compared = 0;
  auto check = [&](const std::string& tname, const std::vector<Case>& cases) {
    const std::string source = read_text(template_path(tname));
    ASSERT_FALSE(source.empty()) << tname;
    auto renderer = ChatRenderer::jinja(source, *tok);
    ASSERT_TRUE(renderer.ok()) << tname << ": " << renderer.message();
    renderer->fix_clock(1721995200);  // 2024-07-26 12:00:00 UTC, the oracle's clock
    ojson convs = ojson::array();
    for (const Case& c : cases)
      convs.push_back(
          {{"name", c.name}, {"context", python_context(c.body, bos, eos, c.with_tools)}});
    const std::string conv_path = test::temp_path("tool-render-convs.json");
    std::ofstream(conv_path, std::ios::binary) << convs.dump();
    const std::string oracle =
        (fs::path(EDGELM_SOURCE_DIR) / "tests" / "template" / "jinja_oracle.py").string();
    const json want = json::parse(run("/usr/bin/python3 '" + oracle + "' '" +
                                      template_path(tname).string() + "' '" + conv_path + "'"),
                                  nullptr, false);
    ASSERT_TRUE(want.is_array() && want.size() == cases.size()) << tname;
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE(tname + " [" + cases[i].name + "]");
      auto parsed = parse_chat_request(cases[i].body.dump(), RequestLimits{});
      ASSERT_TRUE(std::holds_alternative<GenerationRequest>(parsed))
          << std::get<ApiError>(parsed).message;
      auto got = renderer->render(std::get<GenerationRequest>(parsed));
      if (!want[i]["ok"].get<bool>()) {
        EXPECT_FALSE(got.ok()) << "jinja2 fails (" << want[i]["error"] << ") but edgelm renders";
        continue;
      }
      ASSERT_TRUE(got.ok()) << got.message();
      EXPECT_EQ(*got, want[i]["output"].get<std::string>());
      ++compared;
    }
  };
  for (const std::string& n : names)
    check(n, {{"tools", full, true},
              {"thinking", thinking, true},
              {"tool_choice_none", no_tools, false}});
  for (const std::string& n : llama) check(n, {{"one_call", single, true}});
  EXPECT_GE(compared, 15);
}

// ---------------------------------------------------------------------------
// The live server

std::string weather_tools() {
  return ojson::array(
             {{{"type", "function"},
               {"function",
                {{"name", "get_weather"},
                 {"description", "Weather for a city."},
                 {"parameters", ojson::parse(kWeatherParams)}}}},
              {{"type", "function"},
               {"function", {{"name", "get_time"}, {"parameters", ojson::parse(kTimeParams)}}}}})
      .dump();
}

test::LiveServer::Options qwen_server() {
  test::LiveServer::Options o;
  o.ctx = 1024;
  o.server.chat_template = "";
  o.server.chat_template_file = template_path("Qwen-Qwen2.5-7B-Instruct.jinja").string();
  return o;
}

// A request with the two tools; `extra` (",\"key\":value,...") adds or replaces fields.
json tool_chat_body(const std::string& extra) {
  json b = json::parse(
      R"({"messages":[{"role":"user","content":"Weather in Paris?"}],"max_tokens":200,"tools":)" +
      weather_tools() + "}");
  if (!extra.empty()) b.update(json::parse("{" + extra.substr(1) + "}"));
  return b;
}

void expect_valid_calls(const json& calls, const std::string& only = "") {
  ASSERT_TRUE(calls.is_array());
  ASSERT_GE(calls.size(), 1u);
  for (const json& c : calls) {
    EXPECT_EQ(c["id"].get<std::string>().rfind("call_", 0), 0u) << c;
    EXPECT_EQ(c["type"], "function");
    const std::string name = c["function"]["name"];
    if (!only.empty()) {
      EXPECT_EQ(name, only);
    }
    const json args =
        json::parse(c["function"]["arguments"].get<std::string>());  // a string of JSON
    EXPECT_TRUE(args.contains(name == "get_weather" ? "city" : "zone")) << c;
  }
}

TEST(ToolServer, RequiredGivesToolCalls) {
  if (!fs::exists(template_path("Qwen-Qwen2.5-7B-Instruct.jinja")))
    GTEST_SKIP() << "assets/templates/ not fetched";
  test::LiveServer s(qwen_server());
  auto r = s.client().Post("/v1/chat/completions",
                           tool_chat_body(R"(,"tool_choice":"required","seed":3)").dump(),
                           "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_null()) << r->body;
  expect_valid_calls(j["choices"][0]["message"]["tool_calls"]);

  // A function by name, one call only.
  r = s.client().Post(
      "/v1/chat/completions",
      tool_chat_body(R"(,"tool_choice":{"type":"function","function":{"name":"get_time"}})").dump(),
      "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json n = json::parse(r->body);
  expect_valid_calls(n["choices"][0]["message"]["tool_calls"], "get_time");
  EXPECT_EQ(n["choices"][0]["message"]["tool_calls"].size(), 1u);
  EXPECT_TRUE(s.wait_idle());
}

// A forced call's arguments are an object whatever `parameters` says: none
// (the empty object only), `{}` or a schema naming no type (an object); a
// schema of another type is refused, naming the field.
TEST(ToolServer, AForcedCallsArgumentsAreAnObject) {
  if (!fs::exists(template_path("Qwen-Qwen2.5-7B-Instruct.jinja")))
    GTEST_SKIP() << "assets/templates/ not fetched";
  test::LiveServer s(qwen_server());
  const auto forced = [&](const std::string& function, int seed) {
    const std::string body =
        R"({"messages":[{"role":"user","content":"w"}],"max_tokens":100,"seed":)" +
        std::to_string(seed) +
        R"(,"tool_choice":"required","tools":[{"type":"function","function":)" + function + "}]}";
    return s.client().Post("/v1/chat/completions", body, "application/json");
  };
  for (int seed = 1; seed <= 3; ++seed) {
    for (const std::string fn :
         {R"({"name":"a"})", R"({"name":"a","parameters":{}})",
          R"({"name":"a","parameters":{"properties":{"x":{"type":"integer"}}}})"}) {
      auto r = forced(fn, seed);
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << fn << ": " << r->body;
      const json j = json::parse(r->body);
      EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls") << fn << ": " << r->body;
      const json& calls = j["choices"][0]["message"]["tool_calls"];
      ASSERT_TRUE(calls.is_array() && !calls.empty()) << fn << ": " << r->body;
      for (const json& c : calls) {
        const json args = json::parse(c["function"]["arguments"].get<std::string>());
        EXPECT_TRUE(args.is_object()) << fn << ": " << c;
        if (fn == R"({"name":"a"})") {
          EXPECT_TRUE(args.empty()) << "no parameters: no arguments, " << c;
        }
      }
    }
  }
  for (const std::string type : {R"("string")", R"("integer")", R"(["array","null"])"}) {
    auto r = forced(R"({"name":"a","parameters":{"type":)" + type + "}}", 1);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << type << ": " << r->body;
    EXPECT_NE(r->body.find("tools[0].function.parameters.type"), std::string::npos) << r->body;
  }
  EXPECT_TRUE(s.wait_idle());
}

TEST(ToolServer, StreamedToolCallsComeAsDeltas) {
  if (!fs::exists(template_path("Qwen-Qwen2.5-7B-Instruct.jinja")))
    GTEST_SKIP() << "assets/templates/ not fetched";
  test::LiveServer s(qwen_server());
  json body = tool_chat_body(R"(,"tool_choice":"required","seed":5,"stream":true)");
  auto r = s.client().Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  // Accumulate as OpenAI's clients do: by index, the first delta of a call
  // brings id, type and name, later ones append to arguments.
  json calls = json::array();
  std::string finish;
  bool done = false;
  std::istringstream in(r->body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("data: ", 0) != 0) continue;
    const std::string data = line.substr(6);
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    const json c = json::parse(data);
    const json& ch = c["choices"][0];
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    const json& d = ch["delta"];
    EXPECT_FALSE(d.contains("content") && d["content"].is_string() &&
                 !d["content"].get<std::string>().empty())
        << "content in a forced call: " << data;
    if (!d.contains("tool_calls")) continue;
    for (const json& tc : d["tool_calls"]) {
      const size_t i = tc["index"];
      if (i == calls.size()) {
        ASSERT_TRUE(tc.contains("id") && tc.contains("type") && tc["function"].contains("name"))
            << data;
        calls.push_back({{"id", tc["id"]},
                         {"type", tc["type"]},
                         {"function", {{"name", tc["function"]["name"]}, {"arguments", ""}}}});
      }
      ASSERT_LT(i, calls.size()) << data;
      if (tc["function"].contains("arguments"))
        calls[i]["function"]["arguments"] = calls[i]["function"]["arguments"].get<std::string>() +
                                            tc["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(finish, "tool_calls");
  expect_valid_calls(calls);
  EXPECT_TRUE(s.wait_idle());
}

TEST(ToolServer, AutoOnNoiseIsContentOrCalls) {
  if (!fs::exists(template_path("Qwen-Qwen2.5-7B-Instruct.jinja")))
    GTEST_SKIP() << "assets/templates/ not fetched";
  test::LiveServer s(qwen_server());
  auto r = s.client().Post("/v1/chat/completions", tool_chat_body(R"(,"max_tokens":12)").dump(),
                           "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json m = json::parse(r->body)["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_string() || m.contains("tool_calls")) << r->body;
  // The prompt shows the tools, as the template writes them.
  r = s.client().Post("/apply-template", tool_chat_body("").dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  // (this body's keys are sorted: nlohmann::json wrote it so, and the prompt keeps the body's
  // order)
  EXPECT_NE(json::parse(r->body)["prompt"].get<std::string>().find(
                "<tools>\n{\"function\": {\"description\": \"Weather for a city.\", \"name\": "
                "\"get_weather\""),
            std::string::npos)
      << r->body;
}

TEST(ToolServer, ThinkingTemplates) {
  const fs::path qwen3 = template_path("Qwen-Qwen3-0.6B.jinja");
  if (!fs::exists(qwen3)) GTEST_SKIP() << "assets/templates/ not fetched";
  test::LiveServer::Options o;
  o.ctx = 1024;
  o.server.chat_template = "";
  o.server.chat_template_file = qwen3.string();
  test::LiveServer s(o);
  // enable_thinking reaches the template: Qwen3 then closes the thinking itself.
  json body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  body["chat_template_kwargs"] = {{"enable_thinking", false}};
  auto r = s.client().Post("/apply-template", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["prompt"],
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // An earlier turn's reasoning_content is rendered where the template puts it.
  body = {{"messages",
           {{{"role", "user"}, {"content", "Hi"}},
            {{"role", "assistant"}, {"content", "Hello."}, {"reasoning_content", "Greet back."}},
            {{"role", "tool"}, {"content", "x"}}}}};
  r = s.client().Post("/apply-template", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_NE(json::parse(r->body)["prompt"].get<std::string>().find(
                "<think>\nGreet back.\n</think>\n\nHello."),
            std::string::npos)
      << r->body;
  // Answers of a thinking template go through the parser: streamed and not, they agree.
  body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
          {"max_tokens", 16},
          {"seed", 4},
          {"temperature", 0}};
  r = s.client().Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json whole = json::parse(r->body)["choices"][0]["message"];
  body["stream"] = true;
  r = s.client().Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  std::string content, reasoning;
  std::istringstream in(r->body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("data: {", 0) != 0) continue;
    const json d = json::parse(line.substr(6))["choices"][0]["delta"];
    if (d.contains("content") && d["content"].is_string())
      content += d["content"].get<std::string>();
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
  }
  EXPECT_EQ(content, whole["content"].get<std::string>());
  EXPECT_EQ(reasoning, whole.value("reasoning_content", std::string()));
  EXPECT_TRUE(s.wait_idle());
}

TEST(ToolServer, TemplatesWithoutToolSupportRefuseTools) {
  // A template that never reads `tools`: the tools would be dropped silently.
  const std::string plain = test::temp_path("no-tools.jinja");
  std::ofstream(plain, std::ios::binary)
      << "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}{% if "
         "add_generation_prompt %}<assistant>{% endif %}";
  test::LiveServer::Options o;
  o.server.chat_template = "";
  o.server.chat_template_file = plain;
  {
    test::LiveServer s(o);
    for (const char* extra : {"", R"(,"tool_choice":"required")"}) {
      auto r = s.client().Post("/v1/chat/completions", tool_chat_body(extra).dump(), "application/json");
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, 400);
      EXPECT_NE(r->body.find("does not support tools"), std::string::npos) << r->body;
    }
    // tool_choice none: the tools are not shown, so nothing is dropped.
    auto r = s.client().Post("/v1/chat/completions",
                             tool_chat_body(R"(,"tool_choice":"none","max_tokens":2)").dump(),
                             "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_TRUE(s.wait_idle());
    EXPECT_EQ(s.engine->active_slots(), 0);
  }
  // A hand-written format (the fixture's chatml) refuses them too.
  test::LiveServer s(test::LiveServer::Options{});
  auto r = s.client().Post("/v1/chat/completions", tool_chat_body("").dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("cannot show tools"), std::string::npos) << r->body;
  EXPECT_EQ(s.engine->active_slots(), 0);
}

}  // namespace
}  // namespace edgelm::serve
