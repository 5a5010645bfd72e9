// How a chat request's answer is made and read: for tools and thinking, the
// parser that splits the answer (chat_output.h), and for a call that
// tool_choice forces ("required" or a function by name), the constraint
// that makes the model write one in its template's format, arguments valid
// under the function's parameter schema.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>

#include "constrain/json_constraint.h"
#include "engine/token_constraint.h"
#include "serve/chat_output.h"
#include "serve/chat_renderer.h"
#include "serve/openai.h"

namespace edgelm::serve {

// Calls a forced answer may hold when parallel_tool_calls is true.
inline constexpr int kMaxParallelCalls = 8;

struct ChatAnswerPlan {
  std::optional<OutputOptions> output;          // nullopt: the answer is plain content
  std::shared_ptr<TokenConstraint> constraint;  // a forced call's, else null
  int min_tokens = 0;                           // the shortest forced call, in tokens at most
};

// `prompt_text_tail`: the end of the rendered prompt (whether it opens <think>);
// `call_id_base`: what tool-call ids start with ("call_...").
std::variant<ChatAnswerPlan, ApiError> plan_chat_answer(
    const GenerationRequest& r, const ChatRenderer& tmpl, std::string_view prompt_text_tail,
    const std::shared_ptr<const constrain::TokenVocab>& vocab, std::string call_id_base);

// The SSE events for a streamed answer's next text (`end`: the answer is
// over; what the parser held back goes too). The first event carries role
// "assistant" (`first` is cleared once it is sent; `started`: a token has
// come, so the first event goes even with no text); logprobs ride on the
// first event made.
std::string chat_output_events(ChatOutput& out, std::string_view id, int64_t created,
                               std::string_view model, std::string_view text, bool end,
                               bool started, bool& first,
                               const std::vector<TokenLogprobOut>* logprobs);

// The frame of a call to `name` in `format`: the text before its arguments,
// after them, and between two calls.
struct CallFrame {
  std::string prefix, suffix, joiner;
  int max_calls = 1;
};
CallFrame call_frame(ToolFormat format, const std::string& name);

}  // namespace edgelm::serve
