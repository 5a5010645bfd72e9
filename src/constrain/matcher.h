// Steps through a JSON text one byte at a time, refusing every byte that
// would take it outside what a compiled schema (schema.h) generates, and
// knowing at each point how many bytes at least would complete it.
//
// State: a fixed stack of frames, one per open value (object, array,
// string, number, literal), plus the digits of the number being written.
// Nothing is allocated after construction; a copy costs the live frames
// (copy_from), 24 bytes each, so trying a token is: copy, feed its bytes.
#pragma once

#include <cstdint>
#include <string_view>

#include "constrain/schema.h"

namespace edgelm::constrain {

// The fewest bytes that complete the number whose text so far is `prefix`
// (a valid JSON number prefix of node `n`'s kind) into a value within the
// node's bounds; -1 when none does. 0: the text is such a value already.
int number_completion(const Node& n, std::string_view prefix);

class Matcher {
 public:
  explicit Matcher(const Schema& s) : s_(&s) {}

  // Takes the byte, or refuses it (false). After a refusal the state is
  // unspecified: feed a copy when trying.
  bool feed(uint8_t b);
  bool feed(std::string_view bytes) {
    for (char c : bytes)
      if (!feed(static_cast<uint8_t>(c))) return false;
    return true;
  }
  // The text so far is a complete value (the output may end here).
  bool complete() const;
  // Complete, and no byte may follow.
  bool done() const { return finished_; }
  // The fewest bytes that make the text complete (0 when it is).
  int min_close() const;
  // Inside a string with no pattern, between characters: its characters so
  // far and its length limits (for JsonConstraint's shortcut: a token of
  // plain characters is then decided by its length alone).
  struct PlainString {
    int chars, min_len, max_len;
  };
  bool plain_string(PlainString* out) const;
  // Becomes a copy of `o` (same schema), copying only the live frames.
  void copy_from(const Matcher& o);
  int depth() const { return depth_; }

 private:
  struct Frame {
    uint16_t node;
    uint8_t phase;
    uint8_t space;  // the one optional space has been taken
    int32_t n;   // object: next property; array: items; string: characters; literal: bytes matched
    int32_t m;   // object: chosen property; string: UTF-8 bytes pending (and their range); literal:
                 // candidate
    uint64_t x;  // object: key bytes matched; string: pattern positions
  };
  enum class Fed {
    Took,
    Refused,
    Ended
  };  // Ended: the value ended before the byte; the parent takes it

  const Node& node(const Frame& f) const { return s_->nodes[f.node]; }
  bool start_value(int node, uint8_t b);
  bool push(int node, uint8_t phase);
  void pop();
  bool feed_object(Frame& f, const Node& n, uint8_t b);
  bool feed_key(Frame& f, const Node& n, uint8_t b);
  bool feed_array(Frame& f, const Node& n, uint8_t b);
  bool feed_string(Frame& f, const Node& n, uint8_t b);
  Fed feed_number(Frame& f, const Node& n, uint8_t b);
  Fed feed_literal(Frame& f, const Node& n, uint8_t b);
  bool literal_can_grow(const Frame& f, const Node& n) const;
  int last_candidate(const Node& n, int from) const;
  bool key_alive(const Node& n, const Frame& f, int c) const;
  bool number_can_end(const Node& n) const;
  int own_rest(const Frame& f) const;
  int after_child(const Frame& f) const;

  const Schema* s_;
  uint8_t depth_ = 0;
  bool started_ = false;
  bool finished_ = false;
  uint8_t num_len_ = 0;
  char num_[40] = {};  // the number being written (only a leaf, so only ever one)
  Frame f_[Schema::kMaxDepth];
};

}  // namespace edgelm::constrain
