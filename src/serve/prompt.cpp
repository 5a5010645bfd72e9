#include "serve/prompt.h"

#include <cctype>

#include <fmt/format.h>

#include <algorithm>

namespace edgelm::serve {

Result<Truncate> parse_truncate(std::string_view s) {
  if (s == "keep-end") return Truncate::KeepEnd;
  if (s == "keep-start") return Truncate::KeepStart;
  if (s == "none") return Truncate::None;
  return make_error("unknown --truncate policy '{}' (keep-end, keep-start or none)", s);
}

int prompt_limit(int ctx, int want_out) { return ctx - std::clamp(want_out, 1, std::max(1, ctx / 4)); }

namespace {

ApiError bad_messages(std::string message) {
  return {400, "invalid_request_error", "invalid_messages", std::move(message), "messages"};
}

Result<std::vector<int32_t>> encode(const tokenizer::Tokenizer& tok, const ChatRenderer& tmpl,
                                    std::span<const ChatMessage> msgs, const GenerationRequest& r,
                                    std::string* tail = nullptr) {
  EDGELM_ASSIGN(std::string text, tmpl.render(msgs, r, true));
  if (tail) *tail = text.substr(text.size() - std::min<size_t>(text.size(), kPromptTailBytes));
  return tokenizer::encode_rendered(tok, text);
}

// Renders messages [0, first) + [from, end) of `msgs`.
Result<std::vector<int32_t>> render_from(const tokenizer::Tokenizer& tok, const ChatRenderer& tmpl,
                                         const GenerationRequest& r, size_t first, size_t from,
                                         std::vector<ChatMessage>& scratch) {
  const std::vector<ChatMessage>& msgs = r.messages;
  scratch.clear();
  scratch.insert(scratch.end(), msgs.begin(), msgs.begin() + static_cast<long>(first));
  scratch.insert(scratch.end(), msgs.begin() + static_cast<long>(from), msgs.end());
  // Every render ends with the same last turn and generation prompt: the
  // full render's tail stands for all of them.
  return encode(tok, tmpl, scratch, r);
}

std::variant<BuiltPrompt, ApiError> chat_prompt(const tokenizer::Tokenizer& tok, const ChatRenderer& tmpl,
                                                const GenerationRequest& r, int limit, Truncate policy) {
  const std::vector<ChatMessage>& msgs = r.messages;
  BuiltPrompt out;
  auto full = encode(tok, tmpl, msgs, r, &out.tail);
  if (!full.ok()) return bad_messages(full.message());
  const int n_full = static_cast<int>(full->size());
  if (n_full <= limit || policy != Truncate::KeepEnd) {
    out.tokens = std::move(full).value();
    return out;
  }
  // Where a turn may start: each user message after the kept system
  // message, except the first one (dropping nothing is the full render).
  const size_t first = (!msgs.empty() && msgs[0].role == "system") ? 1 : 0;
  std::vector<size_t> cuts;
  for (size_t i = first + 1; i < msgs.size(); ++i)
    if (msgs[i].role == "user") cuts.push_back(i);
  std::vector<ChatMessage> scratch;
  scratch.reserve(msgs.size());
  std::vector<int32_t> best;
  // The fewest turns to drop: the smallest cut index whose render fits.
  // Dropping more turns never makes a prompt longer, so the fits are
  // monotone in the cut and bisection finds it.
  size_t lo = 0, hi = cuts.size();  // answer in [lo, hi]; hi = cuts.size(): none fits
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    auto ids = render_from(tok, tmpl, r, first, cuts[mid], scratch);
    if (!ids.ok()) return bad_messages(ids.message());
    if (static_cast<int>(ids->size()) <= limit) {
      best = std::move(ids).value();
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  if (lo < cuts.size()) {
    if (best.empty()) {
      auto ids = render_from(tok, tmpl, r, first, cuts[lo], scratch);
      if (!ids.ok()) return bad_messages(ids.message());
      best = std::move(ids).value();
    }
    out.tokens = std::move(best);
  } else if (!cuts.empty()) {
    // Not even the last turn alone fits: keep it and cut it token by token.
    auto ids = render_from(tok, tmpl, r, first, cuts.back(), scratch);
    if (!ids.ok()) return bad_messages(ids.message());
    out.tokens = std::move(ids).value();
  } else {
    out.tokens = std::move(full).value();
  }
  out.dropped = n_full - static_cast<int>(out.tokens.size());
  return out;
}

}  // namespace

std::variant<BuiltPrompt, ApiError> build_prompt(const tokenizer::Tokenizer& tok, const ChatRenderer* tmpl,
                                                 const std::string& template_error, const GenerationRequest& r,
                                                 int ctx, int limit, Truncate policy) {
  BuiltPrompt p;
  if (r.chat) {
    if (!tmpl) return ApiError{400, "invalid_request_error", "chat_template", template_error, "messages"};
    auto c = chat_prompt(tok, *tmpl, r, limit, policy);
    if (std::holds_alternative<ApiError>(c)) return c;
    p = std::move(std::get<BuiltPrompt>(c));
  } else if (!r.prompt_tokens.empty()) {
    p.tokens = r.prompt_tokens;
  } else {
    p.tokens = tok.encode(r.prompt, true, true);
  }
  const char* param = r.chat ? "messages" : "prompt";
  if (p.tokens.empty()) return ApiError{400, "invalid_request_error", "empty_prompt", "the prompt has no tokens", param};

  // Token-level truncation when turns could not be dropped (or for completions).
  const int n = static_cast<int>(p.tokens.size());
  if (n <= limit) return p;
  if (policy == Truncate::None) {
    return ApiError{400, "invalid_request_error", "prompt_too_long",
                    fmt::format("the prompt has {} tokens; a slot holds {} tokens and {} are kept for the "
                                "answer, so at most {} prompt tokens fit",
                                n + p.dropped, ctx, ctx - limit, limit),
                    param};
  }
  const bool bos = tok.bos() >= 0 && p.tokens[0] == tok.bos();
  if (policy == Truncate::KeepStart) {
    p.tokens.resize(static_cast<size_t>(limit));
  } else {
    std::vector<int32_t> kept;
    kept.reserve(static_cast<size_t>(limit));
    if (bos) kept.push_back(p.tokens[0]);
    kept.insert(kept.end(), p.tokens.end() - (limit - (bos ? 1 : 0)), p.tokens.end());
    p.tokens = std::move(kept);
  }
  p.dropped += n - static_cast<int>(p.tokens.size());
  return p;
}

std::vector<tokenizer::ChatMessage> template_messages(const GenerationRequest& r) {
  std::vector<tokenizer::ChatMessage> msgs;
  msgs.reserve(r.messages.size());
  for (const auto& m : r.messages) msgs.push_back({m.role, m.content});
  return msgs;
}

Result<std::vector<int32_t>> system_prompt_prefix(const tokenizer::Tokenizer& tok, const ChatRenderer& tmpl,
                                                  const std::string& text) {
  if (text.empty()) return make_error("the system prompt is empty");
  const std::vector<tokenizer::ChatMessage> with_a = {{"system", text}, {"user", "A"}};
  const std::vector<tokenizer::ChatMessage> with_z = {{"system", text}, {"user", "Z"}};
  EDGELM_ASSIGN(const std::string a, tmpl.render(with_a, true));
  EDGELM_ASSIGN(const std::string b, tmpl.render(with_z, true));
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  // The system text must come before the user's: a template that moves it
  // elsewhere (into the first user turn's end, say) has no shared prefix.
  std::string_view core = text;
  while (!core.empty() && std::isspace(static_cast<unsigned char>(core.front()))) core.remove_prefix(1);
  while (!core.empty() && std::isspace(static_cast<unsigned char>(core.back()))) core.remove_suffix(1);
  const std::string_view shared(a.data(), n);
  if (core.empty() || shared.find(core) == std::string_view::npos)
    return make_error("the chat template does not put the system message before the first user message");
  return tokenizer::encode_rendered(tok, shared);
}

}  // namespace edgelm::serve
