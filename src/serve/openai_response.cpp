// Response rendering for the OpenAI-compatible API (see openai.h): bodies,
// chunks and SSE framing. Request parsing is in openai_request.cpp.
#include "serve/openai.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

namespace edgelm::serve {
namespace {

using ojson = nlohmann::ordered_json;  // responses: fields in the order OpenAI sends them


// Length of the well-formed UTF-8 sequence at s[i], or 0 with `bad` set to
// the length of its maximal ill-formed prefix (at least 1). Table 3-7 of the
// Unicode standard: no overlongs, no surrogates, nothing above U+10FFFF.
size_t utf8_sequence(std::string_view s, size_t i, size_t& bad) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c == 0xE0) {
    need = 2;
    lo = 0xA0;
  } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
    need = 2;
  } else if (c == 0xED) {
    need = 2;
    hi = 0x9F;
  } else if (c == 0xF0) {
    need = 3;
    lo = 0x90;
  } else if (c >= 0xF1 && c <= 0xF3) {
    need = 3;
  } else if (c == 0xF4) {
    need = 3;
    hi = 0x8F;
  } else {
    bad = 1;
    return 0;
  }
  for (size_t j = 1; j <= need; ++j) {
    if (i + j >= s.size()) {
      bad = j;
      return 0;
    }
    const auto b = static_cast<unsigned char>(s[i + j]);
    const bool ok = j == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) {
      bad = j;
      return 0;
    }
  }
  return need + 1;
}

// ---------------------------------------------------------------------------
// Responses

// Invalid UTF-8 (model output can hold partial characters) becomes U+FFFD
// instead of an exception.
std::string dump(const ojson& j) {
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

ojson nullable(std::string_view s) {
  return s.empty() ? ojson(nullptr) : ojson(std::string(s));
}

// A float's shortest decimal form as a double, so -0.1f is sent as -0.1 and
// not -0.10000000149011612.
double tidy(float f) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, f);
  double d = f;
  if (ec == std::errc()) std::from_chars(buf, end, d);
  return d;
}

double logprob_out(float lp) {
  if (!std::isfinite(lp) || lp < -9999.0f) return -9999.0;
  return tidy(lp);
}

ojson bytes_of(std::string_view s) {
  ojson a = ojson::array();
  for (char c : s) a.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return a;
}

ojson chat_logprobs(const std::vector<TokenLogprobOut>* lp) {
  if (!lp) return nullptr;
  ojson content = ojson::array();
  for (const TokenLogprobOut& t : *lp) {
    ojson top = ojson::array();
    for (const auto& [text, l] : t.top) {
      ojson alt = ojson::object();
      alt["token"] = valid_utf8(text);
      alt["logprob"] = logprob_out(l);
      alt["bytes"] = bytes_of(text);
      top.push_back(std::move(alt));
    }
    ojson e = ojson::object();
    e["token"] = valid_utf8(t.token);
    e["logprob"] = logprob_out(t.logprob);
    e["bytes"] = bytes_of(t.token);
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  ojson out = ojson::object();
  out["content"] = std::move(content);
  out["refusal"] = nullptr;
  return out;
}

ojson completion_logprobs(const std::vector<TokenLogprobOut>* lp, size_t offset) {
  if (!lp) return nullptr;
  ojson tokens = ojson::array(), token_logprobs = ojson::array(), top = ojson::array(),
        offsets = ojson::array();
  for (const TokenLogprobOut& t : *lp) {
    tokens.push_back(valid_utf8(t.token));
    token_logprobs.push_back(logprob_out(t.logprob));
    // A map from text to logprob: two tokens with the same text keep the first (likelier).
    ojson alt = ojson::object();
    for (const auto& [text, l] : t.top) {
      std::string k = valid_utf8(text);
      if (!alt.contains(k)) alt[k] = logprob_out(l);
    }
    top.push_back(std::move(alt));
    offsets.push_back(offset);
    offset += t.token.size();
  }
  ojson out = ojson::object();
  out["tokens"] = std::move(tokens);
  out["token_logprobs"] = std::move(token_logprobs);
  out["top_logprobs"] = std::move(top);
  out["text_offset"] = std::move(offsets);
  return out;
}

ojson head(std::string_view id, const char* object, int64_t created, std::string_view model) {
  ojson j = ojson::object();
  j["id"] = std::string(id);
  j["object"] = object;
  j["created"] = created;
  j["model"] = std::string(model);
  return j;
}

void add_usage(ojson& j, const Usage& u) {
  ojson usage = ojson::object();
  usage["prompt_tokens"] = u.prompt_tokens;
  usage["completion_tokens"] = u.completion_tokens;
  usage["total_tokens"] = static_cast<int64_t>(u.prompt_tokens) + u.completion_tokens;
  ojson details = ojson::object();
  details["cached_tokens"] = u.cached_tokens;
  usage["prompt_tokens_details"] = std::move(details);
  j["usage"] = std::move(usage);
  if (u.prompt_tokens_dropped > 0) {
    ojson ext = ojson::object();
    ext["prompt_tokens_dropped"] = u.prompt_tokens_dropped;
    j["edgelm"] = std::move(ext);
  }
}

}  // namespace

std::string error_json(const ApiError& e) {
  ojson err = ojson::object();
  err["message"] = e.message;
  err["type"] = e.type;
  err["param"] = nullable(e.param);
  err["code"] = nullable(e.code);
  ojson j = ojson::object();
  j["error"] = std::move(err);
  return dump(j);
}

std::string chat_completion_json(std::string_view id, int64_t created, std::string_view model,
                                 std::string_view content, std::string_view finish_reason,
                                 const Usage& usage, const std::vector<TokenLogprobOut>* logprobs) {
  return chat_completion_json(id, created, model, AssistantOut{std::string(content), {}, {}},
                              finish_reason, usage, logprobs);
}

std::string chat_chunk_json(std::string_view id, int64_t created, std::string_view model,
                            std::string_view delta_content, bool first,
                            std::string_view finish_reason,
                            const std::vector<TokenLogprobOut>* logprobs) {
  ojson delta = ojson::object();
  if (first) delta["role"] = "assistant";
  if (first || !delta_content.empty() || finish_reason.empty()) {
    delta["content"] = std::string(delta_content);
  }
  ojson choice = ojson::object();
  choice["index"] = 0;
  choice["delta"] = std::move(delta);
  choice["logprobs"] = chat_logprobs(logprobs);
  choice["finish_reason"] = nullable(finish_reason);
  ojson j = head(id, "chat.completion.chunk", created, model);
  j["choices"] = ojson::array({std::move(choice)});
  return dump(j);
}

std::string chat_completion_json(std::string_view id, int64_t created, std::string_view model,
                                 const AssistantOut& m, std::string_view finish_reason,
                                 const Usage& usage, const std::vector<TokenLogprobOut>* logprobs) {
  ojson message = ojson::object();
  message["role"] = "assistant";
  message["content"] = m.content.empty() && !m.tool_calls.empty() ? ojson(nullptr) : ojson(valid_utf8(m.content));
  if (!m.reasoning.empty()) message["reasoning_content"] = valid_utf8(m.reasoning);
  if (!m.tool_calls.empty()) {
    ojson calls = ojson::array();
    for (const ParsedToolCall& c : m.tool_calls) {
      ojson f = ojson::object();
      f["name"] = c.name;
      f["arguments"] = valid_utf8(c.arguments);
      ojson call = ojson::object();
      call["id"] = c.id;
      call["type"] = "function";
      call["function"] = std::move(f);
      calls.push_back(std::move(call));
    }
    message["tool_calls"] = std::move(calls);
  }
  ojson choice = ojson::object();
  choice["index"] = 0;
  choice["message"] = std::move(message);
  choice["logprobs"] = chat_logprobs(logprobs);
  choice["finish_reason"] = nullable(finish_reason);
  ojson j = head(id, "chat.completion", created, model);
  j["choices"] = ojson::array({std::move(choice)});
  add_usage(j, usage);
  return dump(j);
}

std::string chat_delta_chunk_json(std::string_view id, int64_t created, std::string_view model,
                                  const ChatDelta& d, bool call_head, bool first,
                                  const std::vector<TokenLogprobOut>* logprobs) {
  ojson delta = ojson::object();
  if (first) delta["role"] = "assistant";
  switch (d.kind) {
    case ChatDelta::Kind::Content:
      delta["content"] = valid_utf8(d.text);
      break;
    case ChatDelta::Kind::Reasoning:
      if (first) delta["content"] = "";
      delta["reasoning_content"] = valid_utf8(d.text);
      break;
    case ChatDelta::Kind::ToolCall: {
      if (first) delta["content"] = nullptr;
      ojson f = ojson::object();
      ojson call = ojson::object();
      call["index"] = d.index;
      if (call_head) {
        call["id"] = d.call.id;
        call["type"] = "function";
        f["name"] = d.call.name;
        f["arguments"] = "";
      } else {
        f["arguments"] = valid_utf8(d.call.arguments);
      }
      call["function"] = std::move(f);
      delta["tool_calls"] = ojson::array({std::move(call)});
      break;
    }
  }
  ojson choice = ojson::object();
  choice["index"] = 0;
  choice["delta"] = std::move(delta);
  choice["logprobs"] = chat_logprobs(logprobs);
  choice["finish_reason"] = nullptr;
  ojson j = head(id, "chat.completion.chunk", created, model);
  j["choices"] = ojson::array({std::move(choice)});
  return dump(j);
}

std::string usage_chunk_json(std::string_view id, int64_t created, std::string_view model,
                             const Usage& usage, bool chat) {
  ojson j = head(id, chat ? "chat.completion.chunk" : "text_completion", created, model);
  j["choices"] = ojson::array();
  add_usage(j, usage);
  return dump(j);
}

std::string completion_json(std::string_view id, int64_t created, std::string_view model,
                            std::string_view text, std::string_view finish_reason,
                            const Usage& usage, const std::vector<TokenLogprobOut>* logprobs) {
  ojson choice = ojson::object();
  choice["text"] = std::string(text);
  choice["index"] = 0;
  choice["logprobs"] = completion_logprobs(logprobs, 0);
  choice["finish_reason"] = nullable(finish_reason);
  ojson j = head(id, "text_completion", created, model);
  j["choices"] = ojson::array({std::move(choice)});
  add_usage(j, usage);
  return dump(j);
}

std::string completion_chunk_json(std::string_view id, int64_t created, std::string_view model,
                                  std::string_view text, std::string_view finish_reason,
                                  const std::vector<TokenLogprobOut>* logprobs,
                                  size_t text_offset) {
  ojson choice = ojson::object();
  choice["text"] = std::string(text);
  choice["index"] = 0;
  choice["logprobs"] = completion_logprobs(logprobs, text_offset);
  choice["finish_reason"] = nullable(finish_reason);
  ojson j = head(id, "text_completion", created, model);
  j["choices"] = ojson::array({std::move(choice)});
  return dump(j);
}

std::string models_json(std::string_view model_id, int64_t created, std::string_view owned_by) {
  ojson m = ojson::object();
  m["id"] = std::string(model_id);
  m["object"] = "model";
  m["created"] = created;
  m["owned_by"] = std::string(owned_by);
  ojson j = ojson::object();
  j["object"] = "list";
  j["data"] = ojson::array({std::move(m)});
  return dump(j);
}

std::string sse_event(std::string_view json_text) {
  // Our JSON is one line; anything else is split into one "data:" line per
  // line of text, as SSE requires, so it cannot end the event early.
  std::string out;
  out.reserve(json_text.size() + 8);
  out += "data: ";
  for (size_t i = 0; i < json_text.size(); ++i) {
    const char c = json_text[i];
    if (c == '\r' || c == '\n') {
      if (c == '\r' && i + 1 < json_text.size() && json_text[i + 1] == '\n') ++i;
      out += "\ndata: ";
    } else {
      out += c;
    }
  }
  out += "\n\n";
  return out;
}

const char* sse_done() {
  return "data: [DONE]\n\n";
}

std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t bad = 0;
    const size_t n = utf8_sequence(s, i, bad);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
      i += bad;
    }
  }
  return out;
}

}  // namespace edgelm::serve
