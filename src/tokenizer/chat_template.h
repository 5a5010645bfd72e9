// OpenAI-style chat messages -> one prompt string, for the common chat formats.
//
// This is not a Jinja engine. A model's template (tokenizer.chat_template) is
// recognised by distinctive substrings and rendered by hand-written code that
// reproduces what the official Hugging Face template produces (trim_blocks,
// lstrip_blocks). Formats:
//
//   chatml   Qwen, SmolLM:  <|im_start|>{role}\n{content}<|im_end|>\n
//            generation prompt <|im_start|>assistant\n. If the template text
//            carries a literal default system prompt (Qwen2: "You are a
//            helpful assistant"), it is used when messages[0] is not a system
//            message, exactly as that template does; otherwise there is none.
//   llama3   {bos}<|start_header_id|>{role}<|end_header_id|>\n\n{trim(content)}<|eot_id|>
//            generation prompt <|start_header_id|>assistant<|end_header_id|>\n\n.
//            (Llama 3.1's injected "Cutting Knowledge Date" system block is not reproduced.)
//   llama2   {bos}[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} {eos}{bos}[INST] ...
//            (contents stripped; user/assistant must alternate)
//   mistral  {bos}[INST] {user} [/INST]{assistant}{eos}[INST] ...   (Mistral-7B-Instruct v0.1/v0.2;
//            a leading system message is put before the first user message, followed by "\n\n")
//   zephyr   <|{role}|>\n{content}{eos}\n   generation prompt <|assistant|>\n
//
// The rendered text contains the BOS text where the template puts bos_token,
// so encode it with add_special = false and parse_special = true.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace edgelm::tokenizer {

class Tokenizer;

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (ChatML also takes others, e.g. "tool")
  std::string content;
};

enum class ChatFormat { kChatml, kLlama3, kLlama2, kMistral, kZephyr };

std::string_view chat_format_name(ChatFormat f);
// "chatml", "llama3", "llama2", "mistral", "zephyr".
std::optional<ChatFormat> chat_format_from_name(std::string_view name);

class ChatTemplate {
 public:
  // bos_text / eos_text: what the template's bos_token / eos_token render as;
  // "" picks the format's usual text (<|begin_of_text|>, <s>, </s>).
  static Result<ChatTemplate> from_name(std::string_view name, std::string bos_text = "", std::string eos_text = "");
  // Recognises the Jinja text of a chat template; an Error names what it looks
  // like when that format is not supported, and suggests an override.
  static Result<ChatTemplate> detect(std::string_view jinja, std::string bos_text = "", std::string eos_text = "");
  // The model's template: by `override_name` when not empty, else detected
  // from tokenizer.chat_template; bos/eos texts from the vocab.
  static Result<ChatTemplate> for_tokenizer(const Tokenizer& tok, std::string_view override_name = "");

  ChatFormat format() const { return format_; }
  std::string_view name() const { return chat_format_name(format_); }

  // Renders the conversation. add_generation_prompt appends the header that
  // makes the model answer as the assistant (llama2/mistral prompts already
  // end that way after a user turn). Errors: no messages, a role the format
  // cannot express, roles that do not alternate where the format requires it.
  Result<std::string> apply(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

  // Text that ends an assistant turn in this format (a hint for stop
  // sequences; these are normally end-of-generation tokens as well).
  const std::vector<std::string>& stop_strings() const { return stops_; }
  // ChatML only: the system prompt used when the conversation has none ("" = none).
  const std::string& default_system() const { return default_system_; }

 private:
  ChatFormat format_ = ChatFormat::kChatml;
  std::string bos_, eos_;
  std::string default_system_;
  std::vector<std::string> stops_;
};

// Renders and tokenizes a conversation: special-token text (<|im_start|>,
// [INST] in Mistral v3 vocabs, ...) becomes those tokens; BOS appears exactly
// once at the front when either the template renders it or the vocab adds it
// (add_bos_token); EOS is never appended.
Result<std::vector<int32_t>> encode_chat(const Tokenizer& tok, const ChatTemplate& tmpl,
                                         std::span<const ChatMessage> messages, bool add_generation_prompt);
// The same for a prompt already rendered (by any template).
std::vector<int32_t> encode_rendered(const Tokenizer& tok, std::string_view text);

}  // namespace edgelm::tokenizer
