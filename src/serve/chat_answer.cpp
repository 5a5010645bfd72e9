#include "serve/chat_answer.h"

#include <fmt/format.h>

#include "constrain/framed_constraint.h"

namespace edgelm::serve {

std::string chat_output_events(ChatOutput& out, std::string_view id, int64_t created,
                               std::string_view model, std::string_view text, bool end,
                               bool started, bool& first,
                               const std::vector<TokenLogprobOut>* logprobs) {
  std::vector<ChatDelta> ds;
  out.push(text, ds);
  if (end) out.finish(ds);
  std::string events;
  const std::vector<TokenLogprobOut>* lps = logprobs;
  for (const ChatDelta& d : ds) {
    events += sse_event(chat_delta_chunk_json(id, created, model, d, true, first, lps));
    first = false;
    lps = nullptr;
    if (d.kind == ChatDelta::Kind::ToolCall)
      events += sse_event(chat_delta_chunk_json(id, created, model, d, false, false, nullptr));
  }
  if (ds.empty() && (lps || (first && started))) {
    events += sse_event(chat_chunk_json(id, created, model, "", first, "", lps));
    first = false;
  }
  return events;
}

CallFrame call_frame(ToolFormat format, const std::string& name) {
  // Names are plain (openai_request.cpp checks them): no JSON escaping needed.
  if (format == ToolFormat::Hermes) {
    // As Qwen2.5/Qwen3 templates render a call (tojson's ", " and ": ").
    return CallFrame{fmt::format("<tool_call>\n{{\"name\": \"{}\", \"arguments\": ", name),
                     std::string("}\n</tool_call>"), std::string("\n"), kMaxParallelCalls};
  }
  // As Llama 3.1-3.3 templates render a call; they take one call a turn.
  return CallFrame{fmt::format("{{\"name\": \"{}\", \"parameters\": ", name), std::string("}"),
                   std::string(), 1};
}

std::variant<ChatAnswerPlan, ApiError> plan_chat_answer(
    const GenerationRequest& r, const ChatRenderer& tmpl, std::string_view prompt_text_tail,
    const std::shared_ptr<const constrain::TokenVocab>& vocab, std::string call_id_base) {
  ChatAnswerPlan plan;
  const TemplateTraits& tr = tmpl.traits();
  const bool tools = !r.tools.empty() && r.tool_choice != ToolChoice::None;
  const bool forced =
      tools && (r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Function);
  if (!tools && !tr.thinks) return plan;
  OutputOptions o;
  o.thinking = tr.thinks;
  // A forced call starts the answer: no thinking before it.
  o.starts_in_thinking = tr.thinks && !forced && prompt_opens_thinking(prompt_text_tail);
  o.id_base = std::move(call_id_base);
  if (tools) {
    o.format = tr.format;  // never None here: the renderer refused such a template
    for (const FunctionTool& t : r.tools) o.tool_names.push_back(t.name);
  }
  if (forced) {
    if (!vocab->has_all_bytes())
      return invalid_request(
          "this model's vocabulary lacks single-byte tokens, which a forced tool call needs to "
          "guarantee the call ends",
          "tool_choice", "unsupported_value");
    std::vector<constrain::FrameAlternative> alts;
    CallFrame frame;
    for (const FunctionTool& t : r.tools) {
      if (r.tool_choice == ToolChoice::Function && t.name != r.tool_choice_name) continue;
      frame = call_frame(tr.format, t.name);
      alts.push_back({frame.prefix, t.schema});
    }
    const int max_calls = r.parallel_tool_calls ? frame.max_calls : 1;
    auto c = constrain::FramedConstraint::make(
        std::move(alts), frame.suffix, frame.joiner,
        r.tool_choice == ToolChoice::Function ? 1 : max_calls, vocab);
    if (!c.ok()) return ApiError{500, "server_error", "internal_error", c.message(), "tool_choice"};
    plan.min_tokens = (*c)->min_tokens();
    plan.constraint = std::shared_ptr<TokenConstraint>(std::move(c).value());
  }
  plan.output = std::move(o);
  return plan;
}

}  // namespace edgelm::serve
