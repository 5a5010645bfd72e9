// The model's own chat template through the API: a Jinja template renders
// the prompt exactly, /apply-template shows it, a template that raises
// refuses the request with its message, and one that cannot be parsed stops
// the server from starting.
#include "serve/chat_renderer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "server_fixture.h"

namespace edgelm {
namespace {

using json = nlohmann::json;
using test::LiveServer;

// A small template in the style of the real ones: a default system prompt,
// trim, a loop with loop.last, raise_exception for a role it rejects.
constexpr const char* kTemplate =
    "{%- if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] %}{% set rest = messages[1:] %}"
    "{%- else %}{% set sys = 'Be helpful.' %}{% set rest = messages %}{% endif %}"
    "{{- bos_token }}[SYS]{{ sys | trim }}[/SYS]\n"
    "{%- for m in rest %}"
    "{%- if m['role'] == 'system' %}{{ raise_exception('a system message must come first') }}{% endif %}"
    "<{{ m['role'] }}>{{ m['content'] }}{% if not loop.last %}\n{% endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}\n<assistant>{% endif %}";

std::string write_template(const std::string& name, const std::string& text) {
  const std::string path = test::temp_path(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

LiveServer::Options with_template(const std::string& file) {
  LiveServer::Options o;
  o.server.chat_template = "";  // the fixture's chatml otherwise
  o.server.chat_template_file = file;
  return o;
}

TEST(ChatRenderer, AJinjaTemplateFileRendersThePromptExactly) {
  LiveServer s(with_template(write_template("tmpl-ok.jinja", kTemplate)));
  const json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "yo"}},
                                   {{"role", "user"}, {"content", "more"}}}}};
  auto r = s.client().Post("/apply-template", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string bos(s.engine->tokenizer().text(s.engine->tokenizer().bos()));
  // As python3-jinja2 renders it (checked): each {%- strips the newline before it.
  EXPECT_EQ(json::parse(r->body)["prompt"], bos + "[SYS]Be helpful.[/SYS]<user>hi<assistant>yo<user>more<assistant>");
  json no_gen = body;
  no_gen["add_generation_prompt"] = false;
  r = s.client().Post("/apply-template", no_gen.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["prompt"], bos + "[SYS]Be helpful.[/SYS]<user>hi<assistant>yo<user>more");
  // A chat request is given exactly that prompt.
  json chat = body;
  chat["max_tokens"] = 2;
  r = s.client().Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const auto want = tokenizer::encode_rendered(
      s.engine->tokenizer(), bos + "[SYS]Be helpful.[/SYS]<user>hi<assistant>yo<user>more<assistant>");
  EXPECT_EQ(json::parse(r->body)["usage"]["prompt_tokens"].get<size_t>(), want.size());
}

TEST(ChatRenderer, ATemplateThatRaisesRefusesTheRequestWithItsMessage) {
  LiveServer s(with_template(write_template("tmpl-raise.jinja", kTemplate)));
  const json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}, {{"role", "system"}, {"content", "late"}}}},
                     {"max_tokens", 2}};
  auto r = s.client().Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("a system message must come first"), std::string::npos) << r->body;
  EXPECT_TRUE(s.wait_idle());
  EXPECT_EQ(s.engine->active_slots(), 0);
}

TEST(ChatRenderer, ATemplateThatCannotBeParsedStopsTheServerFromStarting) {
  auto m = Model::load(test::tiny_model_path());
  ASSERT_TRUE(m.ok());
  auto tok = tokenizer::Tokenizer::from_gguf((*m)->file);
  ASSERT_TRUE(tok.ok());
  const std::string bad = write_template("tmpl-bad.jinja", "hello\n{% for m in messages %}{{ m.content }}\n{% include 'x' %}");
  auto c = serve::ChatRenderer::for_model(*tok, "", bad);
  EXPECT_FALSE(c.renderer.has_value());
  EXPECT_TRUE(c.fatal);
  EXPECT_NE(c.error.find("line 3"), std::string::npos) << c.error;
  EXPECT_NE(c.error.find("include"), std::string::npos) << c.error;
  // A built-in format by name still works, and wins over a file.
  auto b = serve::ChatRenderer::for_model(*tok, "chatml", bad);
  ASSERT_TRUE(b.renderer.has_value());
  EXPECT_EQ(b.renderer->name(), "chatml");
}

}  // namespace
}  // namespace edgelm
