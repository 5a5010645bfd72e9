// libFuzzer target for response_format's schema compiler and the byte
// matcher (serve/json_schema.h, constrain/matcher.h).
//
// Input: byte 0 seeds a random walk, the rest is a schema. A refusal must
// carry a message; a compiled schema is walked byte by byte within a budget:
// the walk must never reach a dead end (no byte allowed while the value is
// incomplete), and what it completes must parse as JSON.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "constrain/matcher.h"
#include "serve/json_schema.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace edgelm;
  if (size < 2 || size > 16384) return 0;
  // Deep documents are the request parser's business (it refuses them).
  int depth = 0, max_depth = 0;
  for (size_t i = 1; i < size; ++i) {
    if (data[i] == '[' || data[i] == '{') max_depth = std::max(max_depth, ++depth);
    if (data[i] == ']' || data[i] == '}') --depth;
  }
  if (max_depth > 64) return 0;
  const auto doc = nlohmann::ordered_json::parse(data + 1, data + size, nullptr, false);
  if (doc.is_discarded()) return 0;
  const serve::CompiledSchema c = serve::compile_json_schema(doc);
  if (!c.schema) {
    check(!c.message.empty());
    return 0;
  }
  constrain::Matcher m(*c.schema), t(*c.schema);
  const int budget = 160;
  if (m.min_close() > budget) return 0;
  std::mt19937 rng(data[0]);
  std::string out;
  for (int left = budget;; --left) {
    std::vector<uint8_t> ok;
    for (int b = 0; b < 256; ++b) {
      t.copy_from(m);
      if (t.feed(static_cast<uint8_t>(b)) && t.min_close() <= left - 1)
        ok.push_back(static_cast<uint8_t>(b));
    }
    if (m.done() || ok.empty() || (m.complete() && rng() % 4 == 0)) break;
    const uint8_t b = ok[rng() % ok.size()];
    check(m.feed(b));
    out += static_cast<char>(b);
  }
  check(m.complete());
  check(!nlohmann::json::parse(out, nullptr, false).is_discarded());
  return 0;
}
