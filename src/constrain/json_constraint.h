// The engine-facing side of a compiled schema: a TokenConstraint that lets
// the sampler pick only tokens whose bytes keep the output on its way to a
// value the schema accepts, and only where that value can still be finished
// within the tokens the request has left.
//
// Budget: a token is allowed only if, after it, the fewest bytes that
// complete the value (Matcher::min_close) fit in the tokens left. Every
// vocabulary here has a token for each byte (byte fallback or byte-level
// BPE), so a byte is at most a token and the value always closes by
// max_tokens: running out of tokens never leaves invalid JSON.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "constrain/matcher.h"
#include "constrain/schema.h"
#include "engine/token_constraint.h"
#include "tokenizer/tokenizer.h"

namespace edgelm::constrain {

// The bytes of every token, grouped by first byte, made once per model
// (23 bytes a token plus the tokenizer's own tables, which it shares).
class TokenVocab {
 public:
  explicit TokenVocab(const tokenizer::Tokenizer& tok);
  int n_vocab() const { return static_cast<int>(pieces_.size()); }
  std::string_view piece(int32_t t) const { return pieces_[static_cast<size_t>(t)]; }
  bool eog(int32_t t) const { return eog_[static_cast<size_t>(t)] != 0; }
  // Tokens whose bytes start with b (b = 256: tokens with no bytes).
  std::span<const int32_t> starting_with(int b) const {
    return {order_.data() + start_[b], order_.data() + start_[b + 1]};
  }
  // Whether every single byte is a token of its own (the budget relies on it).
  bool has_all_bytes() const { return all_bytes_; }
  // The characters of a token made only of characters a JSON string may hold
  // as they are (no quote, backslash or control character; whole UTF-8
  // sequences), or -1.
  int plain_chars(int32_t t) const { return plain_[static_cast<size_t>(t)]; }

 private:
  tokenizer::Tokenizer tok_;  // keeps the tables the pieces point into
  std::vector<std::string_view> pieces_;
  std::vector<uint8_t> eog_;
  std::vector<int16_t> plain_;
  std::vector<int32_t> order_;  // token ids by first byte
  uint32_t start_[258] = {};
  bool all_bytes_ = true;
};

class JsonConstraint final : public TokenConstraint {
 public:
  JsonConstraint(std::shared_ptr<const Schema> schema, std::shared_ptr<const TokenVocab> vocab);
  bool allows(int32_t token, int left) override;
  int mask(const float* logits, float* out, int n_vocab, int left) override;
  void accept(int32_t token) override;
  bool done() const override { return state_.done(); }
  bool complete() const { return state_.complete(); }
  // Tokens the shortest value takes at most (its bytes): a request needs at
  // least this max_tokens.
  int min_tokens() const { return state_.min_close(); }
  // Steps the automaton over bytes given rather than sampled (tests).
  bool advance(std::string_view bytes) { return state_.feed(bytes); }
  const Matcher& state() const { return state_; }

 private:
  std::shared_ptr<const Schema> schema_;
  std::shared_ptr<const TokenVocab> vocab_;
  // A token of plain characters inside a plain string, decided without
  // stepping the matcher; -1 when the shortcut does not apply.
  int plain_verdict(int32_t token, int left) const;

  Matcher state_;
  // Set by mask()/allows() for the current state: the shortcut's inputs.
  bool plain_ = false;
  Matcher::PlainString str_{};
  int close_ = 0;
  Matcher first_;  // scratch: after a token's first byte
  Matcher trial_;  // scratch: after all of a token's bytes
};

}  // namespace edgelm::constrain
