// An incremental parser of Server-Sent Events (the WHATWG "event stream"
// format) for the load generator: bytes go in as they arrive from the socket,
// in pieces of any size, and each complete event comes out the moment its
// terminating blank line has been read, so the caller can time it.
//
// Handles LF, CRLF and lone CR line ends (also a CRLF split across two
// pieces), comment lines (": keep-alive"), multi-line data, a leading UTF-8
// BOM, and fields without a value. A line longer than the limit marks the
// stream as broken instead of growing without bound.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/function_ref.h"

namespace edgelm::loadgen {

struct SseEvent {
  std::string event;  // the "event:" field, "" when absent (the type is then "message")
  std::string data;   // "data:" lines joined with '\n'
  std::string id;     // the last "id:" seen
};

class SseParser {
 public:
  explicit SseParser(size_t max_line_bytes = size_t{1} << 22) : max_line_(max_line_bytes) {}

  // Feeds the next bytes of the stream; calls on_event for each event they
  // complete, in order. Returns false (and ignores the bytes) once a line has
  // exceeded the limit.
  bool feed(std::string_view bytes, FunctionRef<void(const SseEvent&)> on_event);

  // Comment lines seen so far (": ..."), e.g. keep-alives.
  size_t comments() const { return comments_; }
  bool broken() const { return broken_; }
  // True when bytes of an unfinished line or event are buffered: at the end
  // of the stream, the spec discards such an event.
  bool pending() const { return !line_.empty() || has_data_ || !event_.event.empty(); }

 private:
  void line(std::string_view l, FunctionRef<void(const SseEvent&)> on_event);

  size_t max_line_;
  std::string line_;  // the current line, without its end
  SseEvent event_;    // the event being built
  bool has_data_ = false;
  bool last_cr_ = false;  // the previous byte was a CR: a following LF belongs to it
  bool bom_checked_ = false;
  bool broken_ = false;
  size_t comments_ = 0;
};

}  // namespace edgelm::loadgen
