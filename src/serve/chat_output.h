// A chat answer's text split the way OpenAI's API returns it: the model's
// thinking (reasoning_content), its text (content) and its tool calls,
// recognised in the text the model writes in its template's own format.
//
// One parser serves both shapes of answer: a stream feeds it each piece of
// text as it comes and sends the deltas it returns at once; a whole answer
// feeds it everything and joins the deltas (join_deltas), so the two always
// agree. Text that may still turn into a tool call or the end of thinking
// (a partial "<tool_call>", whitespace before a call) is held back until it
// is decided, never sent and then taken back.
//
// Formats:
//   Hermes  <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>, as
//           Qwen2.5, Qwen3 and Hermes templates ask for; several in a row.
//   Llama3  the whole answer is {"name": "f", "parameters": {...}} (an
//           optional <|python_tag|> first; several separated by ';').
// A call that does not parse, names a function that was not offered, or is
// cut short comes back as content, as written. Thinking: <think>...</think>
// at the start of the answer (or the answer starts inside it when the
// prompt ended with an open <think>); whitespace around it is dropped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace edgelm::serve {

enum class ToolFormat { None, Hermes, Llama3 };

// What a Jinja chat template does, read from its text.
struct TemplateTraits {
  bool tools = false;                    // reads the `tools` variable (renders tool definitions)
  bool tool_calls = false;               // renders assistant messages' tool_calls
  ToolFormat format = ToolFormat::None;  // how it asks the model to call
  bool thinks = false;                   // <think> ... </think>
};
TemplateTraits template_traits(std::string_view source);

// Whether a rendered prompt ends inside an open <think> (the template began
// the answer's thinking for the model).
bool prompt_opens_thinking(std::string_view prompt);

struct ParsedToolCall {
  std::string id;  // call_...
  std::string name;
  std::string arguments;  // a JSON object, compact
};

struct ChatDelta {
  enum class Kind { Content, Reasoning, ToolCall };
  Kind kind = Kind::Content;
  std::string text;  // Content, Reasoning
  int index = 0;     // ToolCall: its place among the answer's calls
  ParsedToolCall call;
};

struct OutputOptions {
  ToolFormat format = ToolFormat::None;  // None: no tool calls are looked for
  std::vector<std::string> tool_names;   // the functions offered
  bool thinking = false;                 // <think>...</think> at the start is reasoning
  bool starts_in_thinking = false;       // the answer begins inside <think>
  std::string id_base;                   // ids are id_base + "_" + index ("call_..." )
};

class ChatOutput {
 public:
  explicit ChatOutput(OutputOptions o);
  // Appends what can be sent now of `text` (and what it decides of the text held back).
  void push(std::string_view text, std::vector<ChatDelta>& out);
  // The answer has ended: appends what was held back.
  void finish(std::vector<ChatDelta>& out);
  int tool_calls() const { return calls_; }

 private:
  enum class State { Start, Reasoning, Content, InCall, JsonCalls };
  void step(std::vector<ChatDelta>& out, bool end);
  void emit(ChatDelta::Kind k, std::string_view s, std::vector<ChatDelta>& out);
  void content(std::string_view s, std::vector<ChatDelta>& out);
  bool add_calls(std::string_view text, std::vector<ChatDelta>& out);

  OutputOptions o_;
  State state_;
  std::string buf_;  // text not yet decided
  std::string ws_;   // content whitespace held back (dropped before a call)
  int calls_ = 0;
  bool reason_start_ = true;  // reasoning's leading whitespace is dropped
  bool think_done_ = false;   // </think> was seen
  bool drop_ws_ = false;      // content's leading whitespace after </think> is dropped
};

struct AssistantOut {
  std::string content;
  std::string reasoning;
  std::vector<ParsedToolCall> tool_calls;
};
AssistantOut join_deltas(const std::vector<ChatDelta>& deltas);

}  // namespace edgelm::serve
