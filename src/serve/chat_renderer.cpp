#include "serve/chat_renderer.h"

#include <algorithm>
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
  r.traits_ = template_traits(source);
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
  return jinja_->render(ctx, render_options_);
}

}  // namespace edgelm::serve

namespace edgelm::serve {

namespace {

jinja::Value parse_object(const std::string& text) {
  auto v = jinja::parse_json(text);
  return v.ok() ? std::move(v).value() : jinja::Value::dict();
}

}  // namespace

Result<std::string> ChatRenderer::render(std::span<const ChatMessage> messages, const GenerationRequest& r,
                                         bool add_generation_prompt) const {
  const bool show_tools = !r.tools.empty() && r.tool_choice != ToolChoice::None;
  const bool has_calls = std::any_of(messages.begin(), messages.end(),
                                     [](const ChatMessage& m) { return !m.tool_calls.empty(); });
  if (builtin_) {
    if (show_tools || has_calls)
      return make_error("the chat format '{}' (a hand-written fallback) cannot show tools or tool calls to the "
                        "model; serve a model whose chat template supports tools, or give one with "
                        "--chat-template-file",
                        name_);
    if (!r.template_kwargs.empty())
      return make_error("'chat_template_kwargs' needs a Jinja chat template; the format '{}' takes none", name_);
    std::vector<tokenizer::ChatMessage> plain;
    plain.reserve(messages.size());
    for (const auto& m : messages) plain.push_back({m.role, m.content});
    return builtin_->apply(plain, add_generation_prompt);
  }
  if (show_tools && !traits_.tools)
    return make_error("this model's chat template does not support tools (it never reads 'tools'), so the model "
                      "would not see them; send the request without 'tools' (or with \"tool_choice\": \"none\"), "
                      "or serve a template that supports them with --chat-template-file");
  if (show_tools && traits_.format == ToolFormat::None)
    return make_error("this model's chat template renders tools, but in a tool-call format the server cannot read "
                      "back (supported: <tool_call> JSON as Qwen2.5/Qwen3/Hermes, and Llama 3.x JSON)");
  if (has_calls && !traits_.tool_calls)
    return make_error("this model's chat template does not render assistant 'tool_calls', so the model would not see "
                      "them");
  jinja::Value msgs = jinja::Value::list({});
  for (const auto& m : messages) {
    jinja::Value d = jinja::Value::dict();
    d.set("role", jinja::Value::string(m.role));
    d.set("content", jinja::Value::string(m.content));
    if (!m.reasoning_content.empty()) d.set("reasoning_content", jinja::Value::string(m.reasoning_content));
    if (!m.tool_calls.empty()) {
      jinja::Value calls = jinja::Value::list({});
      for (const ToolCall& c : m.tool_calls) {
        jinja::Value f = jinja::Value::dict();
        f.set("name", jinja::Value::string(c.name));
        f.set("arguments", parse_object(c.arguments));
        jinja::Value call = jinja::Value::dict();
        if (!c.id.empty()) call.set("id", jinja::Value::string(c.id));
        call.set("type", jinja::Value::string("function"));
        call.set("function", std::move(f));
        calls.push_back(std::move(call));
      }
      d.set("tool_calls", std::move(calls));
    }
    if (!m.tool_call_id.empty()) d.set("tool_call_id", jinja::Value::string(m.tool_call_id));
    if (!m.name.empty()) d.set("name", jinja::Value::string(m.name));
    msgs.push_back(std::move(d));
  }
  jinja::Value ctx = jinja::Value::dict();
  // chat_template_kwargs first: the variables the server sets below win.
  if (!r.template_kwargs.empty()) {
    const jinja::Value kw = parse_object(r.template_kwargs);
    for (const auto& [k, v] : kw.dict_data().items)
      if (k.is_string()) ctx.set(k.str(), v);
  }
  ctx.set("messages", std::move(msgs));
  if (show_tools) {
    jinja::Value tools = jinja::Value::list({});
    for (const FunctionTool& t : r.tools) tools.push_back(parse_object(t.json));
    ctx.set("tools", std::move(tools));
  } else {
    ctx.set("tools", jinja::Value::none());
  }
  ctx.set("add_generation_prompt", jinja::Value::boolean(add_generation_prompt));
  ctx.set("bos_token", jinja::Value::string(bos_));
  ctx.set("eos_token", jinja::Value::string(eos_));
  return jinja_->render(ctx, render_options_);
}

}  // namespace edgelm::serve
