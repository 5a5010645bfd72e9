// A conversation's prompt text, as the model expects it: the model's own
// chat template (tokenizer.chat_template, a Jinja template, rendered as
// Python's jinja2 renders it for Hugging Face transformers), a template file
// given by the operator, or one of the hand-written formats by name.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "core/status.h"
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
  // "jinja" or the hand-written format's name.
  const std::string& name() const { return name_; }

 private:
  std::optional<jinja::Template> jinja_;
  std::optional<tokenizer::ChatTemplate> builtin_;
  std::string bos_, eos_, name_;
};

struct ChatRendererChoice {
  std::optional<ChatRenderer> renderer;
  std::string error;   // why there is none (chats are then refused with it)
  bool fatal = false;  // a template was given or found but cannot be used
};

}  // namespace edgelm::serve
