#include "serve/stop_matcher.h"

#include <algorithm>

namespace edgelm::serve {

bool StopMatcher::push(std::string_view text, std::string& out) {
  held_.append(text);
  if (stops_.empty()) {
    out += held_;
    held_.clear();
    return false;
  }
  size_t first = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t p = held_.find(s);
    if (p != std::string::npos) first = std::min(first, p);
  }
  if (first != std::string::npos) {
    out.append(held_, 0, first);
    held_.clear();
    return true;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
      if (std::string_view(held_).substr(held_.size() - n) == std::string_view(s).substr(0, n)) {
        keep = n;
        break;
      }
    }
  }
  out.append(held_, 0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return false;
}

void StopMatcher::flush(std::string& out) {
  out += held_;
  held_.clear();
}

}  // namespace edgelm::serve
