// libFuzzer target for the OpenAI JSON layer (src/serve/openai.h).
//
// The input is fed to both request parsers as a body; a refusal must be a
// 400 whose error body is valid JSON, an acceptance must satisfy the ranges
// the parsers promise. The same bytes are then used as model output (text,
// token pieces, ids, model name) for every response builder: each result
// must be one line of valid JSON (nlohmann refuses invalid UTF-8 on parse,
// so this also checks that U+FFFD replaced every bad byte).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/openai.h"

namespace {

using namespace edgelm::serve;

void check(bool ok) {
  if (!ok) std::abort();
}

// One line of JSON that parses back.
void check_json(const std::string& s) {
  check(s.find('\n') == std::string::npos);
  check(!nlohmann::json::parse(s, nullptr, false).is_discarded());
}

void check_request(const ParsedRequest& r, bool chat, const RequestLimits& lim) {
  if (const auto* e = std::get_if<ApiError>(&r)) {
    check(e->status == 400);
    check(!e->message.empty());
    check_json(error_json(*e));
    return;
  }
  const GenerationRequest& q = std::get<GenerationRequest>(r);
  check(q.chat == chat);
  check(q.sampling.validate().ok());
  check(q.max_tokens == -1 || q.max_tokens >= 1);
  check(q.top_logprobs >= -1 && q.top_logprobs <= kMaxTopLogprobs);
  check(q.stop.size() <= static_cast<size_t>(kMaxStop));
  for (const std::string& s : q.stop) check(!s.empty());
  if (chat) {
    check(!q.messages.empty());
    check(q.messages.size() <= static_cast<size_t>(lim.max_messages));
    for (const ChatMessage& m : q.messages) {
      check(m.role == "system" || m.role == "user" || m.role == "assistant");
      check(m.content.size() <= lim.max_content_bytes);
    }
  } else {
    check(!q.prompt.empty() || !q.prompt_tokens.empty());
    check(q.prompt.size() <= lim.max_content_bytes);
    for (int32_t t : q.prompt_tokens) check(t >= 0 && t < lim.n_vocab);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  // Small limits so that the fuzzer reaches them.
  RequestLimits lim;
  lim.max_messages = 8;
  lim.max_content_bytes = 256;
  lim.n_vocab = 1000;
  check_request(parse_chat_request(bytes, lim), true, lim);
  check_request(parse_completion_request(bytes, lim), false, lim);

  // The bytes as model output: pieces of up to 3 bytes (cutting characters
  // apart), each with a few alternatives and a logprob made from its bytes
  // (negative, -inf and NaN included).
  std::vector<TokenLogprobOut> lp;
  for (size_t i = 0; i < size && lp.size() < 16; i += 3) {
    TokenLogprobOut t;
    t.token = std::string(bytes.substr(i, 3));
    const auto b0 = static_cast<unsigned char>(t.token[0]);
    t.logprob = b0 == 0xFF ? -INFINITY : b0 == 0xFE ? NAN : -static_cast<float>(b0) / 7.0f;
    for (size_t k = 0; k < t.token.size(); ++k)
      t.top.emplace_back(t.token.substr(k), -static_cast<float>(k));
    lp.push_back(std::move(t));
  }
  const std::string_view piece = bytes.substr(0, std::min<size_t>(size, 64));
  const Usage usage{static_cast<int>(size), static_cast<int>(lp.size()),
                    static_cast<int>(size % 3)};
  check_json(chat_completion_json(piece, 1, piece, bytes, "stop", usage, &lp));
  check_json(chat_completion_json("id", 1, "m", bytes, "", usage, nullptr));
  check_json(chat_chunk_json(piece, 2, piece, piece, true, "", &lp));
  check_json(chat_chunk_json("id", 2, "m", "", false, piece, nullptr));
  check_json(usage_chunk_json(piece, 3, piece, usage, size % 2 == 0));
  check_json(completion_json(piece, 4, piece, bytes, "length", usage, &lp));
  check_json(completion_chunk_json("id", 5, "m", piece, "", &lp, size));
  check_json(models_json(piece, 6, piece));

  ApiError e;
  e.message = std::string(bytes);
  e.param = std::string(piece);
  check_json(error_json(e));

  // SSE framing: whatever the payload, one event with no blank line inside.
  const std::string ev = sse_event(bytes);
  check(ev.rfind("data: ", 0) == 0);
  check(ev.size() >= 2 && ev.compare(ev.size() - 2, 2, "\n\n") == 0);
  check(ev.find("\n\n") == ev.size() - 2);

  // valid_utf8 makes anything valid (a strict dump throws on invalid UTF-8)
  // and leaves valid text alone.
  const std::string v = valid_utf8(bytes);
  check(valid_utf8(v) == v);
  check(!nlohmann::json::parse(nlohmann::json(v).dump(), nullptr, false).is_discarded());
  return 0;
}
