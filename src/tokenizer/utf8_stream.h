// Streaming detokenization: token pieces in, whole UTF-8 characters out.
//
// A multi-byte character is often split across tokens (byte-fallback tokens,
// byte-level BPE pieces). The stream holds back an incomplete tail until the
// bytes that finish it arrive. Malformed bytes come out as U+FFFD, decided
// exactly as utf8_sanitize_append decides them, so for any way of cutting the
// bytes into pushes: concat(push...) + flush() == sanitize(all bytes).
#pragma once

#include <string>
#include <string_view>

namespace edgelm::tokenizer {

class Utf8Stream {
 public:
  // Feeds bytes; appends every character that is now complete to `out`.
  // Amortised allocation-free: the held tail is at most 3 bytes, but `bytes`
  // is copied into a reused buffer first.
  void push(std::string_view bytes, std::string& out);
  std::string push(std::string_view bytes) {
    std::string out;
    push(bytes, out);
    return out;
  }

  // End of stream: appends the held tail (each byte of an unfinished
  // sequence becomes U+FFFD) and resets.
  void flush(std::string& out);
  std::string flush() {
    std::string out;
    flush(out);
    return out;
  }

  // Bytes held back waiting for the rest of a character (0..3).
  size_t pending() const { return buf_.size(); }
  void reset() { buf_.clear(); }

 private:
  std::string buf_;
};

}  // namespace edgelm::tokenizer
