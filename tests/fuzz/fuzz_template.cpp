// libFuzzer target: parses arbitrary text as a chat template and renders it
// against a small fixed conversation. Neither step may crash, hang or leak:
// a template is outside data (it comes with the model file). Checks:
//   - parse and render return a value or an Error with a message;
//   - a render is deterministic (two renders give the same result);
//   - the output stays inside RenderOptions::max_output_bytes.
// Input: byte 0 picks the conversation shape, the rest is the template.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "template/template.h"

namespace {

using edgelm::jinja::parse_json;
using edgelm::jinja::RenderOptions;
using edgelm::jinja::Template;
using edgelm::jinja::Value;

#define FUZZ_CHECK(cond)                                                            \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)

Value context(uint8_t shape) {
  static const char* json[] = {
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \u00e9"},
          {"role": "assistant", "content": "Hello"}], "tools": null, "add_generation_prompt": true,
          "bos_token": "<s>", "eos_token": "</s>"})",
      R"({"messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "",
          "tool_calls": [{"id": "abc123XYZ", "type": "function", "function": {"name": "get_weather",
          "arguments": {"location": "Paris"}}}]}, {"role": "tool", "tool_call_id": "abc123XYZ",
          "content": "22 C"}], "tools": [{"type": "function", "function": {"name": "get_weather",
          "description": "d", "parameters": {"type": "object", "properties": {"location": {"type": "string"}},
          "required": ["location"]}}}], "add_generation_prompt": false, "enable_thinking": true,
          "bos_token": "", "eos_token": "<|end|>"})",
      R"({"messages": [], "add_generation_prompt": true})",
  };
  auto v = parse_json(json[shape % 3]);
  FUZZ_CHECK(v.ok());
  return *v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const Value contexts[3] = {context(0), context(1), context(2)};
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  auto t = Template::parse(text);
  if (!t.ok()) {
    FUZZ_CHECK(!t.message().empty());
    return 0;
  }
  RenderOptions opt;
  opt.now_unix = 1721995200;
  opt.max_output_bytes = 1 << 20;
  opt.max_steps = 200000;  // keeps each input fast
  const Value& ctx = contexts[data[0] % 3];
  auto a = t->render(ctx, opt);
  auto b = t->render(ctx, opt);
  FUZZ_CHECK(a.ok() == b.ok());
  if (a.ok()) {
    FUZZ_CHECK(*a == *b);
    FUZZ_CHECK(a->size() <= opt.max_output_bytes);
  } else {
    FUZZ_CHECK(a.message() == b.message());
  }
  // The JSON reader takes outside bytes too.
  auto j = parse_json(text);
  if (!j.ok()) FUZZ_CHECK(!j.message().empty());
  return 0;
}
