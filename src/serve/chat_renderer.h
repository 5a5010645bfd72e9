// A conversation's prompt text, as the model expects it: the model's own
// chat template (tokenizer.chat_template, a Jinja template, rendered as
// Python's jinja2 renders it for Hugging Face transformers), a template file
// given by the operator, or one of the hand-written formats by name.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "core/status.h"
#include "serve/chat_output.h"
#include "serve/openai.h"
#include "template/template.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace edgelm::serve {

struct ChatRendererChoice;

class ChatRenderer {
 public:
  // What serving a model's chats would use, in this order: `builtin_name`
  // (chatml, llama3, ...), the Jinja template in `template_file`, the
  // model's own template, and without any of them the hand-written format
  // recognised from the model (ChatTemplate::for_tokenizer). A Jinja
  // template that cannot be parsed is an error naming its line and what is
  // not supported: the server refuses to start rather than render a wrong
  // prompt.
  static ChatRendererChoice for_model(const tokenizer::Tokenizer& tok, const std::string& builtin_name,
                          const std::string& template_file);
  static Result<ChatRenderer> builtin(std::string_view name, const tokenizer::Tokenizer& tok);
  static Result<ChatRenderer> jinja(std::string_view source, const tokenizer::Tokenizer& tok);

  // The prompt text: what the template renders for `messages` (and, with
  // add_generation_prompt, the start of the assistant's turn). A template
  // that raises (raise_exception, a role it does not accept) is an error
  // with the template's message.
  Result<std::string> render(std::span<const tokenizer::ChatMessage> messages, bool add_generation_prompt) const;
  // A chat request's prompt: `messages` (tool calls and tool results among
  // them) with the request's tools and chat_template_kwargs. Tool-call
  // arguments reach the template as objects, parsed from their JSON text in
  // its key order. Refused (an Error saying why) where the template cannot
  // show what the request holds: tools for a template that does not read
  // `tools` or whose call format the server cannot parse back, tool calls
  // for one that does not render them, any of these for a hand-written format.
  // With tool_choice "none" the tools are not shown to the model.
  Result<std::string> render(std::span<const ChatMessage> messages, const GenerationRequest& r,
                             bool add_generation_prompt) const;
  Result<std::string> render(const GenerationRequest& r) const {
    return render(r.messages, r, r.add_generation_prompt);
  }
  // "jinja" or the hand-written format's name.
  const std::string& name() const { return name_; }
  // Tests: strftime_now() reads this time (Unix seconds, UTC) instead of the clock.
  void fix_clock(int64_t unix_seconds) { render_options_.now_unix = unix_seconds; }
  // What the Jinja template does (all false for a hand-written format).
  const TemplateTraits& traits() const { return traits_; }

 private:
  std::optional<jinja::Template> jinja_;
  TemplateTraits traits_;
  jinja::RenderOptions render_options_;
  std::optional<tokenizer::ChatTemplate> builtin_;
  std::string bos_, eos_, name_;
};

struct ChatRendererChoice {
  std::optional<ChatRenderer> renderer;
  std::string error;   // why there is none (chats are then refused with it)
  bool fatal = false;  // a template was given or found but cannot be used
};

}  // namespace edgelm::serve
