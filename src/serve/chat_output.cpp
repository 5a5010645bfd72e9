#include "serve/chat_output.h"

#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "template/lexer.h"

namespace edgelm::serve {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool is_ws(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

size_t first_non_ws(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}

// Bytes at the end of `s` that are the start of `tag` (they may become it).
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

// Calls nested deeper than this are not calls (parsing and printing them
// recurses; a model can write thousands of '[').
constexpr int kMaxCallDepth = 64;

// Where the JSON object starting at s[at] == '{' ends (one past its '}'), or
// npos (also when it nests deeper than kMaxCallDepth).
size_t object_end(std::string_view s, size_t at) {
  int depth = 0;
  bool in_str = false, esc = false;
  for (size_t i = at; i < s.size(); ++i) {
    const char c = s[i];
    if (in_str) {
      if (esc)
        esc = false;
      else if (c == '\\')
        esc = true;
      else if (c == '"')
        in_str = false;
      continue;
    }
    if (c == '"')
      in_str = true;
    else if (c == '{' || c == '[') {
      if (++depth > kMaxCallDepth) return std::string_view::npos;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return c == '}' ? i + 1 : std::string_view::npos;
    }
  }
  return std::string_view::npos;
}

std::string compact(const ojson& j) {
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

}  // namespace

TemplateTraits template_traits(std::string_view source) {
  TemplateTraits t;
  auto toks = jinja::tokenize(source);
  if (toks.ok()) {
    for (const jinja::Token& k : *toks) {
      if (k.type == jinja::Token::Type::kName && k.text == "tools") t.tools = true;
      if ((k.type == jinja::Token::Type::kName || k.type == jinja::Token::Type::kString) &&
          k.text == "tool_calls")
        t.tool_calls = true;
    }
  }
  // <tool_call> around JSON with "name" and "arguments"; not the XML-like
  // calls some templates put in the same tags (<function=f>, <arg_key>).
  const auto has = [&](std::string_view s) { return source.find(s) != std::string_view::npos; };
  if (has(kCallOpen) && has("\"arguments\"") && !has("<function=") && !has("<arg_key>"))
    t.format = ToolFormat::Hermes;
  else if (has("<|start_header_id|>") && has("\"parameters\""))
    t.format = ToolFormat::Llama3;
  t.thinks = has(kThinkOpen);
  return t;
}

bool prompt_opens_thinking(std::string_view prompt) {
  const size_t open = prompt.rfind(kThinkOpen);
  if (open == std::string_view::npos) return false;
  const size_t close = prompt.rfind(kThinkClose);
  return close == std::string_view::npos || close < open;
}

ChatOutput::ChatOutput(OutputOptions o) : o_(std::move(o)) {
  state_ = o_.starts_in_thinking ? State::Reasoning : State::Start;
  reason_start_ = true;
}

void ChatOutput::emit(ChatDelta::Kind k, std::string_view s, std::vector<ChatDelta>& out) {
  if (s.empty()) return;
  if (!out.empty() && out.back().kind == k && k != ChatDelta::Kind::ToolCall) {
    out.back().text += s;
    return;
  }
  ChatDelta d;
  d.kind = k;
  d.text = std::string(s);
  out.push_back(std::move(d));
}

// Content text. With tool calls possible, whitespace is held back until
// text follows it (a call after it drops it: "\n" between calls is not content).
void ChatOutput::content(std::string_view s, std::vector<ChatDelta>& out) {
  if (s.empty()) return;
  if (o_.format == ToolFormat::None) {
    emit(ChatDelta::Kind::Content, s, out);
    return;
  }
  size_t end = s.size();
  while (end > 0 && is_ws(s[end - 1])) --end;
  if (end == 0) {
    ws_ += s;
    return;
  }
  emit(ChatDelta::Kind::Content, ws_, out);
  ws_.assign(s.substr(end));
  emit(ChatDelta::Kind::Content, s.substr(0, end), out);
}

// Parses one call (Hermes: the text between the tags) or a run of calls
// (Llama3: the whole answer). Appends them only if every one is valid.
bool ChatOutput::add_calls(std::string_view text, std::vector<ChatDelta>& out) {
  std::vector<ParsedToolCall> calls;
  size_t i = first_non_ws(text);
  if (o_.format == ToolFormat::Llama3 && text.substr(i).starts_with(kPythonTag))
    i += kPythonTag.size();
  while (true) {
    while (i < text.size() &&
           (is_ws(text[i]) || (o_.format == ToolFormat::Llama3 && text[i] == ';')))
      ++i;
    if (i == text.size()) break;
    if (text[i] != '{') return false;
    if (o_.format == ToolFormat::Hermes && !calls.empty()) return false;  // one call per tag
    const size_t end = object_end(text, i);
    if (end == std::string_view::npos) return false;
    const ojson j = ojson::parse(text.substr(i, end - i), nullptr, false);
    i = end;
    if (j.is_discarded() || !j.is_object()) return false;
    auto name = j.find("name");
    if (name == j.end() || !name->is_string()) return false;
    const std::string n = name->get<std::string>();
    if (std::find(o_.tool_names.begin(), o_.tool_names.end(), n) == o_.tool_names.end())
      return false;
    const char* keys[2] = {"arguments", "parameters"};
    if (o_.format == ToolFormat::Llama3) std::swap(keys[0], keys[1]);
    std::optional<ojson> args;
    for (const char* k : keys) {
      if (auto a = j.find(k); a != j.end()) {
        args = *a;
        break;
      }
    }
    if (!args) args = ojson::object();
    if (args->is_string()) args = ojson::parse(args->get<std::string>(), nullptr, false);
    if (args->is_discarded() || !args->is_object()) return false;
    calls.push_back({"", n, compact(*args)});
  }
  if (calls.empty()) return false;
  ws_.clear();  // whitespace before a call is not content
  for (ParsedToolCall& c : calls) {
    ChatDelta d;
    d.kind = ChatDelta::Kind::ToolCall;
    d.index = calls_;
    c.id = o_.id_base + "_" + std::to_string(calls_);
    d.call = std::move(c);
    out.push_back(std::move(d));
    ++calls_;
  }
  return true;
}

void ChatOutput::step(std::vector<ChatDelta>& out, bool end) {
  while (true) {
    switch (state_) {
      case State::Start: {
        if (drop_ws_) {
          const size_t i = first_non_ws(buf_);
          buf_.erase(0, i);
          if (buf_.empty()) return;
          drop_ws_ = false;
        }
        const size_t i = first_non_ws(buf_);
        const std::string_view rest = std::string_view(buf_).substr(i);
        if (rest.empty() && !end) return;
        if (o_.thinking && !think_done_) {
          if (rest.starts_with(kThinkOpen)) {
            buf_.erase(0, i + kThinkOpen.size());
            state_ = State::Reasoning;
            continue;
          }
          if (!end && kThinkOpen.starts_with(rest)) return;
        }
        if (o_.format == ToolFormat::Llama3) {
          if (rest.starts_with("{") || rest.starts_with(kPythonTag)) {
            state_ = State::JsonCalls;
            continue;
          }
          if (!end && kPythonTag.starts_with(rest)) return;
        }
        state_ = State::Content;
        continue;
      }
      case State::Reasoning: {
        if (reason_start_) {
          buf_.erase(0, first_non_ws(buf_));
          if (buf_.empty()) return;
          reason_start_ = false;
        }
        const size_t close = buf_.find(kThinkClose);
        size_t upto = close == std::string::npos ? buf_.size() : close;
        if (close == std::string::npos && !end) upto -= partial_tag(buf_, kThinkClose);
        // Whitespace before </think> is dropped: hold it until decided.
        size_t text_end = upto;
        while (text_end > 0 && is_ws(buf_[text_end - 1])) --text_end;
        emit(ChatDelta::Kind::Reasoning, std::string_view(buf_).substr(0, text_end), out);
        if (close != std::string::npos) {
          buf_.erase(0, close + kThinkClose.size());
          think_done_ = true;
          drop_ws_ = true;
          state_ = State::Start;
          continue;
        }
        if (end)
          buf_.clear();
        else
          buf_.erase(0, text_end);
        return;
      }
      case State::Content: {
        if (o_.format != ToolFormat::Hermes) {
          content(buf_, out);
          buf_.clear();
          return;
        }
        const size_t open = buf_.find(kCallOpen);
        if (open != std::string::npos) {
          content(std::string_view(buf_).substr(0, open), out);
          buf_.erase(0, open + kCallOpen.size());
          state_ = State::InCall;
          continue;
        }
        const size_t keep = end ? 0 : partial_tag(buf_, kCallOpen);
        content(std::string_view(buf_).substr(0, buf_.size() - keep), out);
        buf_.erase(0, buf_.size() - keep);
        return;
      }
      case State::InCall: {
        const size_t close = buf_.find(kCallClose);
        if (close == std::string::npos) {
          if (!end) return;
          content(std::string(kCallOpen) + buf_, out);  // cut short: as written
          buf_.clear();
          return;
        }
        const std::string_view inner = std::string_view(buf_).substr(0, close);
        if (!add_calls(inner, out))
          content(std::string(kCallOpen) + std::string(inner) + std::string(kCallClose), out);
        buf_.erase(0, close + kCallClose.size());
        state_ = State::Content;
        continue;
      }
      case State::JsonCalls: {
        if (!end) return;
        if (!add_calls(buf_, out)) content(buf_, out);
        buf_.clear();
        return;
      }
    }
  }
}

void ChatOutput::push(std::string_view text, std::vector<ChatDelta>& out) {
  buf_ += text;
  step(out, false);
}

void ChatOutput::finish(std::vector<ChatDelta>& out) {
  step(out, true);
  if (calls_ == 0) emit(ChatDelta::Kind::Content, ws_, out);
  ws_.clear();
}

AssistantOut join_deltas(const std::vector<ChatDelta>& deltas) {
  AssistantOut a;
  for (const ChatDelta& d : deltas) {
    switch (d.kind) {
      case ChatDelta::Kind::Content:
        a.content += d.text;
        break;
      case ChatDelta::Kind::Reasoning:
        a.reasoning += d.text;
        break;
      case ChatDelta::Kind::ToolCall:
        a.tool_calls.push_back(d.call);
        break;
    }
  }
  return a;
}

}  // namespace edgelm::serve
