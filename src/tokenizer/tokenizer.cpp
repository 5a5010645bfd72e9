#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace edgelm::tokenizer {
namespace {

using Impl = Tokenizer::Impl;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

bool special_allowed(TokenType t, bool parse_special) {
  return t == TokenType::kUserDefined ||
         (parse_special && (t == TokenType::kControl || t == TokenType::kUnknown));
}

// Walks `text` once, calling on_text(fragment) for plain text and
// on_token(id) for each special token found: at every position the longest
// allowed special token wins, scanning left to right. Positions whose byte
// cannot start a special token cost one table lookup.
template <typename OnText, typename OnToken>
void split_special(const Impl& v, std::string_view text, bool parse_special, OnText&& on_text, OnToken&& on_token) {
  size_t cut = 0, i = 0;
  while (i < text.size()) {
    if (!v.trie_first[static_cast<uint8_t>(text[i])]) {
      ++i;
      continue;
    }
    int32_t node = 0, best = kNoToken;
    size_t best_len = 0;
    for (size_t j = i; j < text.size(); ++j) {
      auto it = v.trie_next.find((static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(text[j]));
      if (it == v.trie_next.end()) break;
      node = it->second;
      const int32_t t = v.trie_token[node];
      if (t != kNoToken && special_allowed(v.types[t], parse_special)) {
        best = t;
        best_len = j - i + 1;
      }
    }
    if (best == kNoToken) {
      ++i;
      continue;
    }
    size_t left_end = i;
    if (v.strip[best] & Impl::kLstrip)
      while (left_end > cut && is_space(text[left_end - 1])) --left_end;
    if (left_end > cut) on_text(text.substr(cut, left_end - cut));
    on_token(best);
    i += best_len;
    if (v.strip[best] & Impl::kRstrip)
      while (i < text.size() && is_space(text[i])) ++i;
    cut = i;
  }
  if (cut < text.size()) on_text(text.substr(cut));
}

}  // namespace

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  const Impl& v = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && v.add_bos) out.push_back(v.bos);

  EncodeScratch s;
  if (v.kind == VocabKind::kSpm) {
    // A space goes in front of the text and after every special token, then
    // every ' ' becomes U+2581 (llama.cpp's SPM behaviour).
    bool prev_special = true;
    std::string escaped;
    split_special(
        v, text, parse_special,
        [&](std::string_view frag) {
          escaped.clear();
          if (v.add_space_prefix && prev_special) escaped.append(kSpmSpace);
          for (char c : frag) {
            if (c == ' ')
              escaped.append(kSpmSpace);
            else
              escaped.push_back(c);
          }
          spm_encode(v, escaped, s, out);
          prev_special = false;
        },
        [&](int32_t id) {
          out.push_back(id);
          prev_special = true;
        });
  } else {
    split_special(
        v, text, parse_special, [&](std::string_view frag) { bpe_encode(v, frag, s, out); },
        [&](int32_t id) { out.push_back(id); });
  }

  if (add_special && v.add_eos) out.push_back(v.eos);
  return out;
}

std::string_view Tokenizer::token_piece_view(int32_t id, bool special) const {
  const Impl& v = *impl_;
  if (id < 0 || id >= v.n) return {};
  const TokenType t = v.types[id];
  if (t == TokenType::kControl || t == TokenType::kUnknown) return special ? v.text(id) : std::string_view{};
  return v.piece(id);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const Impl& v = *impl_;
  std::string out;
  bool strip_space = v.add_space_prefix;
  for (int32_t id : ids) {
    std::string_view p = token_piece_view(id, !skip_special);
    if (p.empty()) continue;
    if (strip_space && p[0] == ' ') p.remove_prefix(1);
    strip_space = false;
    out.append(p);
  }
  return out;
}

int32_t Tokenizer::n_vocab() const { return impl_->n; }
VocabKind Tokenizer::kind() const { return impl_->kind; }
std::string_view Tokenizer::model_name() const { return impl_->model; }
std::string_view Tokenizer::pre_name() const { return impl_->pre.name; }
int32_t Tokenizer::bos() const { return impl_->bos; }
int32_t Tokenizer::eos() const { return impl_->eos; }
int32_t Tokenizer::eot() const { return impl_->eot; }
int32_t Tokenizer::eom() const { return impl_->eom; }
int32_t Tokenizer::unk() const { return impl_->unk; }
int32_t Tokenizer::pad() const { return impl_->pad; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::add_eos() const { return impl_->add_eos; }
bool Tokenizer::add_space_prefix() const { return impl_->add_space_prefix; }

bool Tokenizer::is_eog(int32_t id) const { return id >= 0 && id < impl_->n && impl_->is_eog[id]; }
const std::vector<int32_t>& Tokenizer::eog_ids() const { return impl_->eog; }

std::optional<int32_t> Tokenizer::find(std::string_view token_text) const {
  const int32_t id = impl_->lookup(token_text);
  if (id == kNoToken) return std::nullopt;
  return id;
}

std::string_view Tokenizer::text(int32_t id) const {
  return id >= 0 && id < impl_->n ? impl_->text(id) : std::string_view{};
}

TokenType Tokenizer::type(int32_t id) const {
  return id >= 0 && id < impl_->n ? impl_->types[id] : TokenType::kUndefined;
}

float Tokenizer::score(int32_t id) const { return id >= 0 && id < impl_->n ? impl_->scores[id] : 0.0f; }

std::string_view Tokenizer::chat_template() const { return impl_->chat_template; }

}  // namespace edgelm::tokenizer
