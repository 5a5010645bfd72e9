// The OpenAI-compatible JSON layer: request bodies in, validated structs out;
// results in, response bodies and SSE events out. No HTTP and no engine calls
// here, so every function is a pure function of its arguments and can be
// fuzzed on its own (tests/fuzz/fuzz_request.cpp).
//
// Nothing here throws to the caller on any input: hostile bodies (deep
// nesting, huge numbers, invalid UTF-8, duplicate keys, wrong types) become an
// ApiError whose message names the field. Model output that is not valid
// UTF-8 is emitted with U+FFFD in its place. The only failure left is running
// out of memory, which no function here tries to recover from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "engine/sampler.h"
#include "serve/chat_output.h"

namespace edgelm::constrain {
struct Schema;
}

namespace edgelm::serve {

// ---------------------------------------------------------------------------
// Errors

// An error in OpenAI's shape. `type` is OpenAI's error type
// ("invalid_request_error" for 400/404, "server_error" for 500, ...);
// `code` a short machine-readable reason ("invalid_value", "invalid_type",
// "unsupported_parameter", ...) or empty; `param` the offending field as a
// path ("messages[2].content") or empty.
struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string code;
  std::string message;
  std::string param;
};

// A 400 invalid_request_error.
ApiError invalid_request(std::string message, std::string param = {},
                         std::string code = "invalid_value");

// {"error":{"message":...,"type":...,"param":...|null,"code":...|null}}
// (empty param / code become null).
std::string error_json(const ApiError& e);

// ---------------------------------------------------------------------------
// Requests

// One call an assistant message made, as the client sends it back.
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text of an object (OpenAI sends a string); the template gets the object
};

struct ChatMessage {
  std::string role;     // "system", "user", "assistant" or "tool" ("developer" is mapped to "system")
  std::string content;  // text parts concatenated
  std::vector<ToolCall> tool_calls;  // assistant
  std::string tool_call_id;          // tool: the call this is the result of
  std::string name;                  // tool (and function-style clients): the function's name
  std::string reasoning_content;     // assistant: its thinking, for templates that render it
};

// A function the model may call (tools[i] with type "function").
struct FunctionTool {
  std::string name;
  // The whole tools[i] object as compact JSON, keys in the order sent (what
  // the template's `tools` holds, as Python's json.loads would give it).
  std::string json;
  // The parameters' JSON Schema as compact JSON ({"type":"object","properties":{}} when absent).
  std::string parameters;
  // Compiled only when the call is constrained (tool_choice required or this
  // function by name): what its arguments must be.
  std::shared_ptr<const constrain::Schema> schema;
};

// tool_choice: what the model may or must do with `tools`.
enum class ToolChoice { Auto, None, Required, Function };

// OpenAI's sampling defaults (temperature 1, no top-k / top-p / min-p truncation,
// no penalties), which differ from SamplingParams' own command-line defaults.
SamplingParams openai_default_sampling();

struct GenerationRequest {
  bool chat = false;
  std::vector<ChatMessage> messages;  // chat: at least one
  std::string prompt;  // completions: the prompt text (empty when prompt_tokens is used)
  std::vector<int32_t>
      prompt_tokens;    // completions: token ids given instead of text (non-empty => use these)
  std::string model;    // as sent, possibly empty; the server decides whether it matches
  int max_tokens = -1;  // -1: not given; else in [1, INT_MAX] (larger values are clamped; the
                        // server clamps further)
  SamplingParams sampling = openai_default_sampling();
  bool seed_given = false;        // false: sampling.seed is 0 and the server should pick one
  std::vector<std::string> stop;  // up to 16 non-empty strings
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage (only meaningful when stream)
  int top_logprobs = -1;       // -1: no logprobs; 0: the chosen token's only; up to 20 alternatives
  bool ignore_eos = false;     // non-standard (llama-server): keep going past end-of-sequence
  bool cache_prompt = true;    // non-standard (llama-server): false neither reuses nor leaves a cached prefix
  // Chat, non-standard (llama-server's /apply-template): end the rendered
  // prompt with the start of the assistant's turn. Only /apply-template and
  // `edgelm template` read it; a chat completion always adds it.
  bool add_generation_prompt = true;
  // response_format json_object / json_schema: what the answer must be
  // (null: free text). Compiled here; the server makes the token constraint.
  std::shared_ptr<const constrain::Schema> schema;
  std::string response_format = "text";  // "text", "json_object" or "json_schema"
  // Chat: tools (see docs/tools.md). Without tools, tool_choice is None.
  std::vector<FunctionTool> tools;
  ToolChoice tool_choice = ToolChoice::None;
  std::string tool_choice_name;      // ToolChoice::Function: the function
  bool parallel_tool_calls = true;   // false: at most one call per answer
  // chat_template_kwargs: extra variables for the template (enable_thinking,
  // ...), a JSON object as compact text, keys in the order sent ("" = none).
  std::string template_kwargs;
};

struct RequestLimits {
  int max_messages = 4096;
  size_t max_content_bytes = size_t{1} << 20;  // per message (parts concatenated) and per prompt
  int n_vocab = 0;                             // > 0: prompt token ids must be in [0, n_vocab)
};

// Either the request or the reason it was refused (always a 4xx, except a
// 500 for an unexpected internal failure). Use:
//   auto r = parse_chat_request(body, limits);
//   if (auto* err = std::get_if<ApiError>(&r)) return reply(*err);
//   GenerationRequest& req = std::get<GenerationRequest>(r);
using ParsedRequest = std::variant<GenerationRequest, ApiError>;

// POST /tokenize: {"content": string} and llama-server's booleans (a null
// counts as absent). The body is read as before any limits: only the text
// is kept, moved out of the parsed document.
struct TokenizeRequest {
  std::string content;
  bool add_special = false;
  bool parse_special = true;
  bool with_pieces = false;  // each id with its text
};
std::variant<TokenizeRequest, ApiError> parse_tokenize_request(std::string_view body);

// POST /detokenize: {"tokens": [ids]}, each id in [0, n_vocab).
std::variant<std::vector<int32_t>, ApiError> parse_detokenize_request(std::string_view body,
                                                                      int32_t n_vocab);

// Maximum nesting of arrays and objects in a body; deeper ones are refused
// before anything is built for them.
inline constexpr int kMaxJsonDepth = 64;
inline constexpr int kMaxStop = 16;
inline constexpr int kMaxTopLogprobs = 20;
inline constexpr int kMaxTools = 128;  // tools per request, and calls per message

// POST /v1/chat/completions. Fields read: messages, model, max_tokens,
// max_completion_tokens, temperature, top_p, top_k*, min_p*, presence_penalty,
// frequency_penalty, repeat_penalty*, seed, stop, n (only 1), stream,
// stream_options, logprobs, top_logprobs, response_format ("text",
// "json_object", "json_schema": see serve/json_schema.h for the schema
// keywords; a keyword that is not enforced is a 400 naming it, and 'stop'
// cannot be combined with a JSON format), user, ignore_eos* (* non-standard,
// as llama-server), tools, tool_choice ("auto", "none", "required" or
// {"type":"function","function":{"name":...}}), parallel_tool_calls,
// chat_template_kwargs* (an object of extra template variables, e.g.
// enable_thinking). Messages may be assistant turns with tool_calls and
// "tool" results. functions / function_call (the deprecated forms) and
// logit_bias are refused unless empty or "none".
// Any other field is ignored; a null value counts as absent.
ParsedRequest parse_chat_request(std::string_view body, const RequestLimits& limits);

// POST /v1/completions. As chat, with prompt instead of messages (a string,
// an array of one string, an array of token ids or an array of one array of
// token ids), logprobs an integer 0..20, and echo / best_of / suffix refused
// when they ask for anything but the default. response_format as for chat.
ParsedRequest parse_completion_request(std::string_view body, const RequestLimits& limits);

// ---------------------------------------------------------------------------
// Responses. Every function returns one compact line of JSON (no newline).

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int prompt_tokens_dropped = 0;  // > 0: also emitted as "edgelm": {"prompt_tokens_dropped": N}
  int cached_tokens = 0;          // prompt_tokens_details.cached_tokens (OpenAI's field)
};

// One generated token with its log-probability and the most likely
// alternatives (descending). Texts are raw bytes and may be partial UTF-8:
// emitted as "bytes" (chat) and as a "token" string with U+FFFD in place of
// invalid bytes. A logprob that is not finite or below -9999 is sent as -9999
// (OpenAI's value for "vanishingly unlikely").
struct TokenLogprobOut {
  std::string token;
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;
};

// `finish_reason`: "stop", "length", ... or empty for null. `logprobs`:
// nullptr when not requested (emitted as null).

// object "chat.completion": choices[0].message {role: "assistant", content}.
std::string chat_completion_json(std::string_view id, int64_t created, std::string_view model,
                                 std::string_view content, std::string_view finish_reason,
                                 const Usage& usage,
                                 const std::vector<TokenLogprobOut>* logprobs = nullptr);

// object "chat.completion.chunk". `first`: the delta also carries
// role "assistant" (and content, even empty). A chunk with a finish_reason
// and no text has an empty delta {}, as OpenAI sends.
std::string chat_chunk_json(std::string_view id, int64_t created, std::string_view model,
                            std::string_view delta_content, bool first,
                            std::string_view finish_reason,
                            const std::vector<TokenLogprobOut>* logprobs = nullptr);

// With tools or thinking (chat_output.h): choices[0].message {role,
// content (null when the answer is only tool calls), reasoning_content (when
// the model thought), tool_calls [{id, type: "function", function: {name,
// arguments (a JSON string)}}] (when it called)}.
std::string chat_completion_json(std::string_view id, int64_t created, std::string_view model,
                                 const AssistantOut& message, std::string_view finish_reason,
                                 const Usage& usage,
                                 const std::vector<TokenLogprobOut>* logprobs = nullptr);

// A chunk for one delta of a parsed answer: {content}, {reasoning_content}
// or, for a call, {tool_calls: [{index, id, type, function: {name,
// arguments: ""}}]} with `call_head`, else {tool_calls: [{index, function:
// {arguments}}]}. `first`: the delta also carries role "assistant".
std::string chat_delta_chunk_json(std::string_view id, int64_t created, std::string_view model,
                                  const ChatDelta& d, bool call_head, bool first,
                                  const std::vector<TokenLogprobOut>* logprobs = nullptr);

// The extra last chunk for stream_options.include_usage: choices [] and usage.
std::string usage_chunk_json(std::string_view id, int64_t created, std::string_view model,
                             const Usage& usage, bool chat);

// object "text_completion": choices[0].text; logprobs in the completions
// format {tokens, token_logprobs, top_logprobs, text_offset}. text_offset
// counts bytes from `text_offset` (the offset of this text's first byte in
// the whole completion; for a stream, the bytes sent in earlier chunks).
std::string completion_json(std::string_view id, int64_t created, std::string_view model,
                            std::string_view text, std::string_view finish_reason,
                            const Usage& usage,
                            const std::vector<TokenLogprobOut>* logprobs = nullptr);
std::string completion_chunk_json(std::string_view id, int64_t created, std::string_view model,
                                  std::string_view text, std::string_view finish_reason,
                                  const std::vector<TokenLogprobOut>* logprobs = nullptr,
                                  size_t text_offset = 0);

// GET /v1/models: {"object":"list","data":[{id, object:"model", created, owned_by}]}.
std::string models_json(std::string_view model_id, int64_t created, std::string_view owned_by);

// Server-Sent Events framing: "data: " + json + "\n\n", and the stream's end.
std::string sse_event(std::string_view json);
const char* sse_done();

// `s` with every ill-formed UTF-8 sequence replaced by U+FFFD (one per
// maximal ill-formed subpart, as Unicode recommends).
std::string valid_utf8(std::string_view s);

}  // namespace edgelm::serve
