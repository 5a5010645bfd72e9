#include "loadgen/sse_parser.h"

namespace edgelm::loadgen {

bool SseParser::feed(std::string_view bytes, FunctionRef<void(const SseEvent&)> on_event) {
  if (broken_) return false;
  if (!bom_checked_) {
    // The BOM can only be judged once three bytes (or a mismatch) are in.
    static constexpr std::string_view kBom = "\xEF\xBB\xBF";
    const size_t have = line_.size();
    const size_t take = std::min(kBom.size() - have, bytes.size());
    const std::string head = line_ + std::string(bytes.substr(0, take));
    if (kBom.substr(0, head.size()) == head) {
      if (head.size() < kBom.size()) {
        line_ = head;  // still undecided; held back as a BOM prefix
        return true;
      }
      line_.clear();
      bytes.remove_prefix(take);
    }
    bom_checked_ = true;
  }
  size_t start = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (c != '\n' && c != '\r') continue;
    if (c == '\n' && last_cr_ && i == start && line_.empty()) {
      // The LF of a CRLF whose CR ended the previous piece or line.
      last_cr_ = false;
      start = i + 1;
      continue;
    }
    if (line_.empty()) {
      line(bytes.substr(start, i - start), on_event);
    } else {
      line_.append(bytes.substr(start, i - start));
      line(line_, on_event);
      line_.clear();
    }
    last_cr_ = c == '\r';
    start = i + 1;
  }
  if (start < bytes.size()) {
    last_cr_ = false;
    line_.append(bytes.substr(start));
    if (line_.size() > max_line_) {
      broken_ = true;
      line_.clear();
      return false;
    }
  }
  return true;
}

void SseParser::line(std::string_view l, FunctionRef<void(const SseEvent&)> on_event) {
  if (l.empty()) {  // a blank line dispatches the event
    if (has_data_) on_event(event_);
    event_.data.clear();
    event_.event.clear();  // the id persists, as the spec says
    has_data_ = false;
    return;
  }
  if (l.front() == ':') {
    ++comments_;
    return;
  }
  std::string_view field = l, value;
  if (const size_t colon = l.find(':'); colon != std::string_view::npos) {
    field = l.substr(0, colon);
    value = l.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) event_.data.push_back('\n');
    event_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    event_.event.assign(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) event_.id.assign(value);
  }
  // "retry" and unknown fields are ignored.
}

}  // namespace edgelm::loadgen
