// Stop strings over streamed text. Text that might be the start of a stop
// string is held back until it is known not to be, so a client never sees
// part of a stop sequence.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace edgelm::serve {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Adds text; appends to `out` what is safe to emit. Returns true when a
  // stop string was found: `out` then ends just before it and the rest is dropped.
  bool push(std::string_view text, std::string& out);
  // End of generation: releases the held-back text.
  void flush(std::string& out);

 private:
  std::vector<std::string> stops_;
  std::string held_;
};

}  // namespace edgelm::serve
