// A request's prompt as tokens, cut to fit a slot: chat messages rendered
// through the model's template and tokenized, or a completion's text or ids.
// Runs before a slot is taken, so a slow render (a huge conversation) holds
// no slot and delays no one else's admission.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/status.h"
#include "serve/openai.h"
#include "serve/chat_renderer.h"
#include "tokenizer/tokenizer.h"

namespace edgelm::serve {

enum class Truncate { KeepEnd, KeepStart, None };
Result<Truncate> parse_truncate(std::string_view s);

struct BuiltPrompt {
  std::vector<int32_t> tokens;
  int dropped = 0;  // prompt tokens cut away to fit the slot
  std::string tail;  // chat: the rendered prompt's last bytes (does it open <think>?)
};
inline constexpr size_t kPromptTailBytes = 64;

// The prompt-token limit of a slot of `ctx` tokens: room is kept for the
// answer (`want_out` tokens, but never more than a quarter of the slot).
int prompt_limit(int ctx, int want_out);

// Builds the prompt of `r` in at most `limit` tokens. A chat that does not
// fit drops whole turns (a user message and the replies after it), oldest
// first, keeping a leading system message and the last turn; how many is
// found by bisection, so a conversation of n turns costs O(log n) renders.
// What still does not fit is cut token by token (KeepEnd keeps the end and
// BOS, KeepStart the start); with Truncate::None it is refused.
// `tmpl` may be null for completions; a chat without one is refused with
// `template_error` as the message.
std::variant<BuiltPrompt, ApiError> build_prompt(const tokenizer::Tokenizer& tok, const ChatRenderer* tmpl,
                                                 const std::string& template_error, const GenerationRequest& r,
                                                 int ctx, int limit, Truncate policy);

// A chat request's messages as the chat template takes them.
std::vector<tokenizer::ChatMessage> template_messages(const GenerationRequest& r);

// The pinned prefix of a system prompt: the tokens of what `tmpl` renders
// for a conversation that starts with a system message of `text`, up to
// where the first user message's content begins (the text two renderings
// that differ only in that content share). An error when the template
// raises or puts nothing of the system message before the user's text.
Result<std::vector<int32_t>> system_prompt_prefix(const tokenizer::Tokenizer& tok, const ChatRenderer& tmpl,
                                                  const std::string& text);

}  // namespace edgelm::serve
