// One admitted request's answer, from engine tokens to bytes on the wire:
// a small state machine run by httplib's content provider (SSE chunks, or
// one JSON body with whitespace heartbeats), and the releaser that gives
// the slot back whatever happens.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "serve/admission.h"
#include "serve/chat_output.h"
#include "serve/metrics.h"

namespace httplib {
struct Response;
}

namespace edgelm::serve {

struct StreamSpec {
  std::string id;       // chatcmpl-... / cmpl-...
  std::string model;    // as reported in every chunk
  int64_t created = 0;  // unix seconds
  bool chat = false;
  bool stream = false;
  // An HTTP/1.0 client, which knows no chunked encoding: a body that is not
  // sent whole ends when the connection closes.
  bool close_delimited = false;
  bool include_usage = false;
  int top_logprobs = -1;
  int n_prompt = 0;
  int dropped = 0;
  std::vector<std::string> stops;
  std::chrono::steady_clock::time_point t0;  // when the request arrived
  // When the gate admitted it, predicting its first token predicted_ttft
  // seconds later (Admission::observe_ttft learns from the two).
  std::chrono::steady_clock::time_point t_admitted;
  double predicted_ttft = 0;
  // Chat with tools or thinking: how the answer is split into content,
  // reasoning_content and tool_calls (chat_output.h); nullopt: plain content.
  std::optional<OutputOptions> output;
};

struct StreamDeps {
  Engine& engine;
  Admission& admission;
  Metrics& metrics;
  int heartbeat_ms = 500;
};

// Sets `res` to stream the request running in `ref`. From here the slot
// belongs to the response: it is released (and handed to the next waiter)
// when the last token has been read, or when the client goes away, or
// when this call or the response ends by an exception (a failed
// allocation) or is dropped unsent.
//
// How an answer ends:
//   stop / length          last chunk with that finish_reason, then [DONE]
//   cancelled by the server an SSE error event (code "cancelled"), never a
//   (drain timeout)         false "stop"; non-streamed: an error body
//   engine error           the same with code "engine_error"
//   client gone            nothing more is written; counted as 499
// A non-streamed answer sends nothing for its first heartbeat_ms: one that
// ends by then (well or not) is sent whole with its real status (503, 500);
// after that the status line 200 goes out, then a space every heartbeat_ms,
// and a failure is an error body (OpenAI's shape) behind them. Either way
// /metrics counts the status of what happened, not the 200 on the wire.
void stream_response(httplib::Response& res, const StreamDeps& deps, StreamSpec spec, SlotRef ref);

}  // namespace edgelm::serve
