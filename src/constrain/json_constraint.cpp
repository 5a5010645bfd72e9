#include "constrain/json_constraint.h"

#include <algorithm>
#include <cmath>

namespace edgelm::constrain {

namespace {

// Characters in `p` if every one may stand in a JSON string as it is (and
// each UTF-8 sequence is whole and valid); -1 otherwise.
int plain_chars_of(std::string_view p) {
  int chars = 0;
  for (size_t i = 0; i < p.size();) {
    const uint8_t b = static_cast<uint8_t>(p[i]);
    int len = 0, lo = 0x80, hi = 0xBF;
    if (b < 0x80) {
      if (b < 0x20 || b == 0x7F || b == '"' || b == '\\') return -1;
      len = 1;
    } else if (b >= 0xC2 && b <= 0xDF)
      len = 2;
    else if (b == 0xE0)
      len = 3, lo = 0xA0;
    else if (b == 0xED)
      len = 3, hi = 0x9F;
    else if (b >= 0xE1 && b <= 0xEF)
      len = 3;
    else if (b == 0xF0)
      len = 4, lo = 0x90;
    else if (b >= 0xF1 && b <= 0xF3)
      len = 4;
    else if (b == 0xF4)
      len = 4, hi = 0x8F;
    else
      return -1;
    if (i + static_cast<size_t>(len) > p.size()) return -1;
    for (int k = 1; k < len; ++k) {
      const uint8_t c = static_cast<uint8_t>(p[i + static_cast<size_t>(k)]);
      if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return -1;
    }
    i += static_cast<size_t>(len);
    ++chars;
  }
  return chars > 0 && chars < 32767 ? chars : -1;
}

}  // namespace

TokenVocab::TokenVocab(const tokenizer::Tokenizer& tok) : tok_(tok) {
  const int n = tok_.n_vocab();
  pieces_.resize(static_cast<size_t>(n));
  eog_.resize(static_cast<size_t>(n));
  plain_.resize(static_cast<size_t>(n));
  uint32_t count[257] = {};
  bool single[256] = {};
  for (int32_t t = 0; t < n; ++t) {
    pieces_[static_cast<size_t>(t)] = tok_.token_piece_view(t);
    eog_[static_cast<size_t>(t)] = tok_.is_eog(t) ? 1 : 0;
    const std::string_view p = pieces_[static_cast<size_t>(t)];
    plain_[static_cast<size_t>(t)] =
        static_cast<int16_t>(eog_[static_cast<size_t>(t)] ? -1 : plain_chars_of(p));
    ++count[p.empty() ? 256 : static_cast<uint8_t>(p[0])];
    if (p.size() == 1) single[static_cast<uint8_t>(p[0])] = true;
  }
  for (int b = 0; b < 257; ++b) start_[b + 1] = start_[b] + count[b];
  order_.resize(static_cast<size_t>(n));
  uint32_t fill[257];
  std::copy(start_, start_ + 257, fill);
  for (int32_t t = 0; t < n; ++t) {
    const std::string_view p = pieces_[static_cast<size_t>(t)];
    order_[fill[p.empty() ? 256 : static_cast<uint8_t>(p[0])]++] = t;
  }
  // The bytes JSON output needs: printable ASCII (UTF-8 may come in longer tokens).
  for (int b = 0x20; b < 0x7F; ++b) all_bytes_ = all_bytes_ && single[b];
}

JsonConstraint::JsonConstraint(std::shared_ptr<const Schema> schema,
                               std::shared_ptr<const TokenVocab> vocab)
    : schema_(std::move(schema)),
      vocab_(std::move(vocab)),
      state_(*schema_),
      first_(*schema_),
      trial_(*schema_) {}

int JsonConstraint::plain_verdict(int32_t token, int left) const {
  if (!plain_) return -1;
  const int chars = vocab_->plain_chars(token);
  if (chars < 0) return -1;
  if (str_.chars + chars > str_.max_len) return 0;
  // The characters count towards minLength; closing still needs the rest.
  const int close = close_ - std::min(chars, std::max(0, str_.min_len - str_.chars));
  return close <= left ? 1 : 0;
}

bool JsonConstraint::allows(int32_t token, int left) {
  if (token < 0 || token >= vocab_->n_vocab()) return false;
  if (vocab_->eog(token)) return state_.complete();
  const std::string_view p = vocab_->piece(token);
  if (p.empty()) return false;
  plain_ = state_.plain_string(&str_);
  if (plain_) close_ = state_.min_close();
  if (const int v = plain_verdict(token, left); v >= 0) return v == 1;
  trial_.copy_from(state_);
  return trial_.feed(p) && trial_.min_close() <= left;
}

int JsonConstraint::mask(const float* logits, float* out, int n_vocab, int left) {
  int allowed = 0;
  plain_ = state_.plain_string(&str_);
  if (plain_) close_ = state_.min_close();
  const bool end_ok = state_.complete();
  auto keep = [&](int32_t t) {
    out[t] = logits[t];
    ++allowed;
  };
  for (int b = 0; b < 256; ++b) {
    const std::span<const int32_t> bucket = vocab_->starting_with(b);
    if (bucket.empty()) continue;
    first_.copy_from(state_);
    // A refused first byte refuses its whole group (end-of-generation
    // tokens aside, whatever their text).
    const bool ok = first_.feed(static_cast<uint8_t>(b));
    if (!ok && !end_ok) continue;
    for (int32_t t : bucket) {
      if (t >= n_vocab) continue;
      if (vocab_->eog(t)) {
        if (end_ok) keep(t);
        continue;
      }
      if (!ok) continue;
      if (const int v = plain_verdict(t, left); v >= 0) {
        if (v == 1) keep(t);
        continue;
      }
      const std::string_view p = vocab_->piece(t);
      if (p.size() == 1) {
        if (first_.min_close() <= left) keep(t);
      } else {
        trial_.copy_from(first_);
        if (trial_.feed(p.substr(1)) && trial_.min_close() <= left) keep(t);
      }
    }
  }
  if (end_ok)
    for (int32_t t : vocab_->starting_with(256))
      if (t < n_vocab && vocab_->eog(t)) keep(t);
  return allowed;
}

void JsonConstraint::accept(int32_t token) {
  if (token < 0 || token >= vocab_->n_vocab() || vocab_->eog(token)) return;
  state_.feed(vocab_->piece(token));
}

}  // namespace edgelm::constrain
