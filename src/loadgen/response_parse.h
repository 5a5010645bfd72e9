// How the load generator reads OpenAI-style answers: one SSE data payload or
// one whole body at a time. Tolerant of what other servers add (llama-server's
// "timings", a usage chunk with empty choices); never throws.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace edgelm::loadgen {

struct ChunkInfo {
  enum class Kind {
    Done,     // "[DONE]"
    Data,     // a JSON chunk (with or without content)
    Error,    // a JSON chunk carrying {"error": ...}
    Invalid,  // not JSON
  };
  Kind kind = Kind::Invalid;
  size_t content_bytes = 0;  // text of choices[0] (delta.content, delta.reasoning_content or text)
  std::string content;       // its delta.content (or text)
  int completion_tokens = -1;  // usage.completion_tokens when present
  std::string error_code;      // Kind::Error: see error_code_of
};

ChunkInfo parse_chunk(std::string_view data);

// A non-streamed completion body (leading whitespace allowed).
struct BodyInfo {
  bool json = false;           // the body parsed as a JSON object
  size_t content_bytes = 0;    // choices[0].message.content or choices[0].text
  std::string content;         // that text
  int completion_tokens = -1;  // usage.completion_tokens when present
  std::string error_code;      // non-empty when the body is an error
};

BodyInfo parse_body(std::string_view body);

// The machine-readable reason of an OpenAI-style error body: error.code (a
// string, or a number as text), else error.type, else "error" for an error
// object without either; "" when the body is not an error.
std::string error_code_of(std::string_view body);

}  // namespace edgelm::loadgen
