// JSON in and out of template Values, without a JSON library (the engine
// layers do not use one). parse_json reads RFC 8259 text as Python's
// json.loads would (integers stay ints, order of keys kept, a repeated key
// keeps its first place and its last value). dump_json writes what Python's
// json.dumps writes for the same options, which is what the `tojson` filter
// of Hugging Face chat templates produces.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "template/value.h"

namespace edgelm::jinja {

// Nesting deeper than this is an error (hostile input must not exhaust the stack).
inline constexpr int kMaxJsonDepth = 512;

Result<Value> parse_json(std::string_view text);

struct JsonDumpOptions {
  std::optional<std::string> indent;  // nullopt: one line; "  ": two spaces per level
  std::optional<std::string> item_separator;  // default ", " (or "," with indent)
  std::optional<std::string> key_separator;   // default ": "
  bool sort_keys = false;
  bool ensure_ascii = false;  // tojson of chat templates passes ensure_ascii=False
};

// Fails as json.dumps does: undefined, callables and generators are not
// serializable; sort_keys with keys of mixed types; a cycle (too deep).
Result<std::string> dump_json(const Value& v, const JsonDumpOptions& opt = {});

}  // namespace edgelm::jinja
