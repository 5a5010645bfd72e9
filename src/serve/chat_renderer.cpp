#include "serve/chat_renderer.h"

#include <fstream>
#include <sstream>

namespace edgelm::serve {

Result<ChatRenderer> ChatRenderer::builtin(std::string_view name, const tokenizer::Tokenizer& tok) {
  EDGELM_ASSIGN(tokenizer::ChatTemplate t, tokenizer::ChatTemplate::for_tokenizer(tok, name));
  ChatRenderer r;
  r.name_ = std::string(t.name());
  r.builtin_ = std::move(t);
  return r;
}

Result<ChatRenderer> ChatRenderer::jinja(std::string_view source, const tokenizer::Tokenizer& tok) {
  EDGELM_ASSIGN(jinja::Template t, jinja::Template::parse(source));
  ChatRenderer r;
  r.jinja_ = std::move(t);
  r.bos_ = std::string(tok.text(tok.bos()));
  r.eos_ = std::string(tok.text(tok.eos()));
  r.name_ = "jinja";
  return r;
}

ChatRendererChoice ChatRenderer::for_model(const tokenizer::Tokenizer& tok, const std::string& builtin_name,
                                             const std::string& template_file) {
  ChatRendererChoice c;
  if (!builtin_name.empty()) {
    auto r = builtin(builtin_name, tok);
    if (r.ok()) c.renderer = std::move(r).value();
    else c.error = r.message(), c.fatal = true;
    return c;
  }
  if (!template_file.empty()) {
    std::ifstream in(template_file, std::ios::binary);
    if (!in) {
      c.error = "cannot read the chat template file " + template_file;
      c.fatal = true;
      return c;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    auto r = jinja(ss.str(), tok);
    if (r.ok()) c.renderer = std::move(r).value();
    else c.error = template_file + ": " + r.message(), c.fatal = true;
    return c;
  }
  if (!tok.chat_template().empty()) {
    auto r = jinja(tok.chat_template(), tok);
    if (r.ok()) {
      c.renderer = std::move(r).value();
    } else {
      c.error = "the model's chat template (tokenizer.chat_template): " + r.message() +
                "; serve it with --chat-template-file F or a built-in format (--chat-template chatml, llama3, ...)";
      c.fatal = true;
    }
    return c;
  }
  // No template in the file: the hand-written format recognised from the model, if any.
  auto r = builtin("", tok);
  if (r.ok()) c.renderer = std::move(r).value();
  else c.error = r.message();
  return c;
}

Result<std::string> ChatRenderer::render(std::span<const tokenizer::ChatMessage> messages,
                                         bool add_generation_prompt) const {
  if (builtin_) return builtin_->apply(messages, add_generation_prompt);
  jinja::Value msgs = jinja::Value::list({});
  for (const auto& m : messages) {
    jinja::Value d = jinja::Value::dict();
    d.set("role", jinja::Value::string(m.role));
    d.set("content", jinja::Value::string(m.content));
    msgs.push_back(std::move(d));
  }
  jinja::Value ctx = jinja::Value::dict();
  ctx.set("messages", std::move(msgs));
  ctx.set("tools", jinja::Value::none());
  ctx.set("add_generation_prompt", jinja::Value::boolean(add_generation_prompt));
  ctx.set("bos_token", jinja::Value::string(bos_));
  ctx.set("eos_token", jinja::Value::string(eos_));
  return jinja_->render(ctx);
}

}  // namespace edgelm::serve
