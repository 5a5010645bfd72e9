#include "constrain/json_constraint.h"

#include <algorithm>
#include <cmath>

namespace edgelm::constrain {

TokenVocab::TokenVocab(const tokenizer::Tokenizer& tok) : tok_(tok) {
  const int n = tok_.n_vocab();
  pieces_.resize(static_cast<size_t>(n));
  eog_.resize(static_cast<size_t>(n));
  uint32_t count[257] = {};
  bool single[256] = {};
  for (int32_t t = 0; t < n; ++t) {
    pieces_[static_cast<size_t>(t)] = tok_.token_piece_view(t);
    eog_[static_cast<size_t>(t)] = tok_.is_eog(t) ? 1 : 0;
    const std::string_view p = pieces_[static_cast<size_t>(t)];
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

JsonConstraint::JsonConstraint(std::shared_ptr<const Schema> schema, std::shared_ptr<const TokenVocab> vocab)
    : schema_(std::move(schema)), vocab_(std::move(vocab)), state_(*schema_), first_(*schema_), trial_(*schema_) {}

bool JsonConstraint::allows(int32_t token, int left) {
  if (token < 0 || token >= vocab_->n_vocab()) return false;
  if (vocab_->eog(token)) return state_.complete();
  const std::string_view p = vocab_->piece(token);
  if (p.empty()) return false;
  trial_.copy_from(state_);
  return trial_.feed(p) && trial_.min_close() <= left;
}

int JsonConstraint::mask(float* logits, int n_vocab, int left) {
  int allowed = 0;
  for (int b = 0; b < 256; ++b) {
    const std::span<const int32_t> bucket = vocab_->starting_with(b);
    if (bucket.empty()) continue;
    first_.copy_from(state_);
    const bool ok = first_.feed(static_cast<uint8_t>(b));
    for (int32_t t : bucket) {
      if (t >= n_vocab) continue;
      bool keep = false;
      if (ok && !vocab_->eog(t)) {
        const std::string_view p = vocab_->piece(t);
        if (p.size() == 1) {
          keep = first_.min_close() <= left;
        } else {
          trial_.copy_from(first_);
          keep = trial_.feed(p.substr(1)) && trial_.min_close() <= left;
        }
      } else if (vocab_->eog(t)) {
        keep = state_.complete();
      }
      if (keep) ++allowed;
      else logits[t] = -INFINITY;
    }
  }
  const bool end_ok = state_.complete();
  for (int32_t t : vocab_->starting_with(256)) {
    if (t >= n_vocab) continue;
    if (end_ok && vocab_->eog(t)) ++allowed;
    else logits[t] = -INFINITY;
  }
  return allowed;
}

void JsonConstraint::accept(int32_t token) {
  if (token < 0 || token >= vocab_->n_vocab() || vocab_->eog(token)) return;
  state_.feed(vocab_->piece(token));
}

}  // namespace edgelm::constrain
