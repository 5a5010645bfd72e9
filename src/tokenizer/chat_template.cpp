#include "tokenizer/chat_template.h"

#include "tokenizer/tokenizer.h"

namespace edgelm::tokenizer {
namespace {

constexpr std::string_view kNames[] = {"chatml", "llama3", "llama2", "mistral", "zephyr"};
constexpr std::string_view kSupported = "chatml, llama3, llama2, mistral, zephyr";

bool contains(std::string_view hay, std::string_view needle) { return hay.find(needle) != std::string_view::npos; }

// Python's str.strip() / Jinja's trim, for ASCII whitespace.
std::string_view trim(std::string_view s) {
  constexpr std::string_view ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// A ChatML template's literal default system prompt: the text between
// "<|im_start|>system" + newline and "<|im_end|>" inside one string literal
// (no quotes, braces or '+' in it, so it is not built from a message).
std::string chatml_default_system(std::string_view t) {
  const std::string_view head = "<|im_start|>system";
  for (size_t pos = t.find(head); pos != std::string_view::npos; pos = t.find(head, pos + 1)) {
    size_t p = pos + head.size();
    if (t.substr(p, 1) == "\n")
      p += 1;
    else if (t.substr(p, 2) == "\\n")
      p += 2;
    else
      continue;
    const size_t end = t.find("<|im_end|>", p);
    if (end == std::string_view::npos) continue;
    const std::string_view body = t.substr(p, end - p);
    if (body.empty() || body.find_first_of("'\"{}+") != std::string_view::npos) continue;
    std::string out;  // undo the Jinja string escapes that can occur in prose
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] == '\\' && i + 1 < body.size()) {
        const char c = body[++i];
        out.push_back(c == 'n' ? '\n' : c == 't' ? '\t' : c);
      } else {
        out.push_back(body[i]);
      }
    }
    return out;
  }
  return {};
}

Status need_alternation(std::span<const ChatMessage> turns, std::string_view format) {
  for (size_t i = 0; i < turns.size(); ++i) {
    const std::string_view want = i % 2 == 0 ? "user" : "assistant";
    if (turns[i].role != want)
      return make_error("the {} chat format needs user and assistant messages to alternate, starting with user; "
                        "message {} has role '{}'",
                        format, i, turns[i].role);
  }
  return Status::Ok();
}

}  // namespace

std::string_view chat_format_name(ChatFormat f) { return kNames[static_cast<int>(f)]; }

std::optional<ChatFormat> chat_format_from_name(std::string_view name) {
  for (int i = 0; i < static_cast<int>(std::size(kNames)); ++i)
    if (kNames[i] == name) return static_cast<ChatFormat>(i);
  return std::nullopt;
}

Result<ChatTemplate> ChatTemplate::from_name(std::string_view name, std::string bos_text, std::string eos_text) {
  auto f = chat_format_from_name(name);
  if (!f) return make_error("unknown chat template '{}' (supported: {})", name, kSupported);
  ChatTemplate t;
  t.format_ = *f;
  t.bos_ = std::move(bos_text);
  t.eos_ = std::move(eos_text);
  switch (*f) {
    case ChatFormat::kChatml: t.stops_ = {"<|im_end|>"}; break;
    case ChatFormat::kLlama3:
      if (t.bos_.empty()) t.bos_ = "<|begin_of_text|>";
      t.stops_ = {"<|eot_id|>"};
      break;
    case ChatFormat::kLlama2:
    case ChatFormat::kMistral:
      if (t.bos_.empty()) t.bos_ = "<s>";
      if (t.eos_.empty()) t.eos_ = "</s>";
      t.stops_ = {t.eos_};
      break;
    case ChatFormat::kZephyr:
      if (t.eos_.empty()) t.eos_ = "</s>";
      t.stops_ = {t.eos_};
      break;
  }
  return t;
}

Result<ChatTemplate> ChatTemplate::detect(std::string_view j, std::string bos_text, std::string eos_text) {
  if (trim(j).empty())
    return make_error("the model has no chat template (tokenizer.chat_template); choose one by name ({})", kSupported);
  std::string_view name;
  std::string_view unsupported;  // what it looks like, when we know but cannot render it exactly
  if (contains(j, "<|im_start|>")) {
    if (contains(j, "<|im_sep|>")) unsupported = "Phi-4 (ChatML with <|im_sep|>)";
    name = "chatml";
  } else if (contains(j, "<|start_header_id|>") && contains(j, "<|end_header_id|>")) {
    name = "llama3";
  } else if (contains(j, "[INST]")) {
    if (contains(j, "<<SYS>>")) {
      name = "llama2";
    } else if (contains(j, "[SYSTEM_PROMPT]")) {
      unsupported = "Mistral v7";
    } else if (contains(j, "[AVAILABLE_TOOLS]") || contains(j, "\"[INST]\"")) {
      unsupported = "Mistral v3 / Tekken";
    } else {
      name = "mistral";
    }
  } else if (contains(j, "<|user|>") && contains(j, "<|assistant|>")) {
    if (contains(j, "<|end|>"))
      unsupported = "Phi-3";
    else
      name = "zephyr";
  }
  if (!unsupported.empty())
    return make_error("the model's chat template looks like {}, which is not supported; choose one by name ({})",
                      unsupported, kSupported);
  if (name.empty())
    return make_error("unrecognised chat template (it starts \"{}\"); choose one by name ({})",
                      std::string(j.substr(0, 60)), kSupported);
  EDGELM_ASSIGN(ChatTemplate t, from_name(name, std::move(bos_text), std::move(eos_text)));
  if (t.format_ == ChatFormat::kChatml) t.default_system_ = chatml_default_system(j);
  return t;
}

Result<ChatTemplate> ChatTemplate::for_tokenizer(const Tokenizer& tok, std::string_view override_name) {
  std::string bos(tok.text(tok.bos())), eos(tok.text(tok.eos()));
  if (!override_name.empty()) return from_name(override_name, std::move(bos), std::move(eos));
  return detect(tok.chat_template(), std::move(bos), std::move(eos));
}

Result<std::string> ChatTemplate::apply(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  if (messages.empty()) return make_error("a chat needs at least one message");
  std::string out;
  switch (format_) {
    case ChatFormat::kChatml: {
      if (!default_system_.empty() && messages[0].role != "system")
        out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
      for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    }
    case ChatFormat::kLlama3: {
      out += bos_;
      for (const ChatMessage& m : messages) {
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
        out += trim(m.content);
        out += "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    }
    case ChatFormat::kLlama2:
    case ChatFormat::kMistral: {
      const bool llama2 = format_ == ChatFormat::kLlama2;
      std::span<const ChatMessage> turns = messages;
      std::string system;
      if (turns[0].role == "system") {
        system = turns[0].content;
        turns = turns.subspan(1);
      }
      if (turns.empty()) return make_error("the {} chat format needs a user message", name());
      EDGELM_TRY(need_alternation(turns, name()));
      if (!llama2) out += bos_;
      for (size_t i = 0; i < turns.size(); ++i) {
        std::string content = turns[i].content;
        if (i == 0 && !system.empty())
          content = llama2 ? "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content : system + "\n\n" + content;
        if (turns[i].role == "user") {
          if (llama2)
            out += bos_ + "[INST] " + std::string(trim(content)) + " [/INST]";
          else
            out += "[INST] " + content + " [/INST]";
        } else {
          if (llama2)
            out += " " + std::string(trim(content)) + " " + eos_;
          else
            out += content + eos_;
        }
      }
      break;  // a prompt ending with [/INST] is already the generation prompt
    }
    case ChatFormat::kZephyr: {
      for (const ChatMessage& m : messages) {
        if (m.role != "system" && m.role != "user" && m.role != "assistant")
          return make_error("the zephyr chat format has no role '{}'", m.role);
        out += "<|" + m.role + "|>\n" + m.content + eos_ + "\n";
      }
      if (add_generation_prompt) out += "<|assistant|>\n";
      break;
    }
  }
  return out;
}

Result<std::vector<int32_t>> encode_chat(const Tokenizer& tok, const ChatTemplate& tmpl,
                                         std::span<const ChatMessage> messages, bool add_generation_prompt) {
  EDGELM_ASSIGN(std::string text, tmpl.apply(messages, add_generation_prompt));
  return encode_rendered(tok, text);
}

std::vector<int32_t> encode_rendered(const Tokenizer& tok, std::string_view text) {
  const std::string_view bos_text = tok.text(tok.bos());
  std::string_view body = text;
  bool want_bos = tok.add_bos();
  if (!bos_text.empty() && body.starts_with(bos_text)) {
    body.remove_prefix(bos_text.size());
    want_bos = true;
  }
  std::vector<int32_t> ids;
  if (want_bos && tok.bos() != kNoToken) ids.push_back(tok.bos());
  const std::vector<int32_t> rest = tok.encode(body, /*add_special=*/false, /*parse_special=*/true);
  ids.insert(ids.end(), rest.begin(), rest.end());
  return ids;
}

}  // namespace edgelm::tokenizer
