#include "tokenizer/utf8_stream.h"

#include "tokenizer/unicode.h"

namespace edgelm::tokenizer {

void Utf8Stream::push(std::string_view bytes, std::string& out) {
  buf_.append(bytes);
  const std::string_view s = buf_;
  size_t i = 0, run = 0;  // [run, i) is complete and not yet emitted
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t n = 1;
    const Utf8Prefix c = utf8_classify(s, i, &n);
    if (c == Utf8Prefix::kIncomplete) break;  // only possible in the last 3 bytes
    if (c == Utf8Prefix::kComplete) {
      i += n;
      continue;
    }
    out.append(s.substr(run, i - run));
    out.append(kReplacementChar);
    run = ++i;
  }
  out.append(s.substr(run, i - run));
  buf_.erase(0, i);
}

void Utf8Stream::flush(std::string& out) {
  utf8_sanitize_append(out, buf_);
  buf_.clear();
}

}  // namespace edgelm::tokenizer
