// What the load generator sends: OpenAI request bodies with prompts of a
// predictable length.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace edgelm::loadgen {

// About `n_tokens` tokens of text: short common English words (three letters
// and a space, one token each in the BPE vocabularies of Qwen2, Llama 3 and
// GPT-2), drawn from a generator seeded with `seed`, so every request gets a
// different prompt (no prefix cache can help) and runs are reproducible.
std::string make_prompt(int n_tokens, uint64_t seed);

struct BodyOptions {
  bool chat = false;    // /v1/chat/completions (messages) or /v1/completions (prompt)
  bool stream = false;  // SSE, asking for usage in the last chunk
  int max_tokens = 64;
  std::string model;       // "" leaves the field out
  double temperature = 0;  // greedy by default: no sampling noise in the timing
};

// The JSON body of one request. "ignore_eos": true (llama-server's and
// edgelm's extension) makes every answer run to max_tokens.
std::string make_body(const BodyOptions& o, const std::string& prompt);

// A chat request that continues a conversation: an optional system message
// (`system`, "" for none), the earlier turns as alternating user and
// assistant messages (`history`, user first), then `user`.
std::string make_conversation_body(const BodyOptions& o, const std::string& system,
                                   const std::vector<std::string>& history, const std::string& user);

// The route for `chat`: "/v1/chat/completions" or "/v1/completions".
const char* route(bool chat);

}  // namespace edgelm::loadgen
