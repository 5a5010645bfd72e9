#include "loadgen/request_body.h"

#include <array>
#include <nlohmann/json.hpp>
#include <random>
#include <string_view>

namespace edgelm::loadgen {

namespace {

// 64 words, each " xyz" a single token in the common byte-level BPE vocabularies.
constexpr std::array<std::string_view, 64> kWords = {
    "the", "and", "for", "you", "not", "are", "but", "was", "all", "any", "can", "had", "her",
    "one", "our", "out", "day", "get", "has", "him", "his", "how", "man", "new", "now", "old",
    "see", "two", "way", "who", "boy", "did", "its", "let", "put", "say", "she", "too", "use",
    "car", "sun", "sea", "red", "big", "cat", "dog", "run", "eat", "top", "end", "why", "ask",
    "men", "off", "own", "set", "try", "yes", "box", "cup", "far", "got", "hot", "low"};

}  // namespace

std::string make_prompt(int n_tokens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s;
  s.reserve(static_cast<size_t>(std::max(n_tokens, 0)) * 4);
  for (int i = 0; i < n_tokens; ++i) {
    if (i > 0) s.push_back(' ');
    s.append(kWords[rng() % kWords.size()]);
  }
  return s;
}

namespace {

// The fields every body shares, around `j`'s prompt or messages.
std::string finish_body(const BodyOptions& o, nlohmann::json& j) {
  if (!o.model.empty()) j["model"] = o.model;
  j["max_tokens"] = o.max_tokens;
  j["temperature"] = o.temperature;
  j["ignore_eos"] = true;
  if (o.stream) {
    j["stream"] = true;
    j["stream_options"] = {{"include_usage", true}};
  }
  return j.dump();
}

}  // namespace

std::string make_body(const BodyOptions& o, const std::string& prompt) {
  nlohmann::json j;
  if (o.chat)
    j["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", prompt}}});
  else
    j["prompt"] = prompt;
  return finish_body(o, j);
}

std::string make_conversation_body(const BodyOptions& o, const std::string& system,
                                   const std::vector<std::string>& history, const std::string& user) {
  nlohmann::json msgs = nlohmann::json::array();
  if (!system.empty()) msgs.push_back({{"role", "system"}, {"content", system}});
  for (size_t i = 0; i < history.size(); ++i)
    msgs.push_back({{"role", i % 2 == 0 ? "user" : "assistant"}, {"content", history[i]}});
  msgs.push_back({{"role", "user"}, {"content", user}});
  nlohmann::json j;
  j["messages"] = std::move(msgs);
  return finish_body(o, j);
}

const char* route(bool chat) {
  return chat ? "/v1/chat/completions" : "/v1/completions";
}

}  // namespace edgelm::loadgen
