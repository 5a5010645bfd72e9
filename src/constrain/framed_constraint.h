// JSON values inside fixed text: what a tool call is in a model's own
// format, e.g. Qwen's
//
//   <tool_call>\n{"name": "get_weather", "arguments": {...}}\n</tool_call>
//
// is the prefix `<tool_call>\n{"name": "get_weather", "arguments": `, a JSON
// value of the function's parameter schema, and the suffix `}\n</tool_call>`.
// The output is one or more such frames:
//
//   P_k V_k S  ( J P_k V_k S )*      at most max_frames times
//
// where the prefixes P_k are alternatives (one per function, told apart by
// their bytes: none may be a prefix of another), V_k a value of schema k,
// S the suffix and J the joiner. The output may end after any whole frame.
// Bytes are matched one at a time, so a token may span a prefix, the value
// and the suffix. The same budget rule as JsonConstraint: a token is
// allowed only if the fewest bytes that finish the frame fit in the tokens left.
#pragma once

#include <bitset>
#include <memory>
#include <string>
#include <vector>

#include "constrain/json_constraint.h"
#include "constrain/matcher.h"
#include "constrain/schema.h"
#include "engine/token_constraint.h"

namespace edgelm::constrain {

struct FrameAlternative {
  std::string prefix;
  std::shared_ptr<const Schema> schema;
};

class FramedConstraint final : public TokenConstraint {
 public:
  static constexpr int kMaxAlternatives = 128;

  // `alts` non-empty (at most kMaxAlternatives), each schema finished;
  // max_frames >= 1. A prefix that is a prefix of another is an Error.
  static Result<std::unique_ptr<FramedConstraint>> make(std::vector<FrameAlternative> alts,
                                                        std::string suffix, std::string joiner,
                                                        int max_frames,
                                                        std::shared_ptr<const TokenVocab> vocab);

  bool allows(int32_t token, int left) override;
  int mask(const float* logits, float* out, int n_vocab, int left) override;
  void accept(int32_t token) override;
  bool done() const override { return done(state_); }
  bool complete() const { return complete(state_); }
  // Bytes the shortest output takes (at most as many tokens).
  int min_tokens() const { return min_close(state_); }
  // Steps over bytes given rather than sampled (tests).
  bool advance(std::string_view bytes) { return feed(state_, bytes); }

 private:
  enum Phase : uint8_t { kPrefix, kValue, kSuffix };
  struct State {
    explicit State(const Schema& s) : m(s) {}
    Matcher m;  // the value being written (kValue)
    Phase phase = kPrefix;
    int pos = 0;     // bytes matched of the prefix (joiner included) or the suffix
    int alt = -1;    // the alternative chosen (kValue, kSuffix)
    int frames = 0;  // frames written whole
    std::bitset<kMaxAlternatives> alive;  // kPrefix: alternatives still matching
    void copy_from(const State& o);
  };

  FramedConstraint(std::vector<FrameAlternative> alts, std::string suffix, std::string joiner,
                   int max_frames, std::shared_ptr<const TokenVocab> vocab);
  char prefix_byte(const State& s, int k, int pos) const;
  int prefix_len(const State& s, int k) const;
  bool feed(State& s, uint8_t b);
  bool feed(State& s, std::string_view bytes);
  bool complete(const State& s) const { return s.phase == kPrefix && s.pos == 0 && s.frames > 0; }
  bool done(const State& s) const { return complete(s) && s.frames >= max_frames_; }
  int min_close(const State& s) const;

  std::vector<FrameAlternative> alts_;
  std::vector<int> min_value_;  // the shortest value of each schema, in bytes
  std::string suffix_, joiner_;
  int max_frames_;
  std::shared_ptr<const TokenVocab> vocab_;
  State state_, first_, trial_, scratch_;
};

}  // namespace edgelm::constrain
