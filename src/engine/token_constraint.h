// What the sampler may pick next, as the request's output format allows: an
// automaton over the tokens' bytes that the engine steps but never looks
// into (a JSON schema's lives in src/constrain/; the engine sees no JSON).
//
// One instance belongs to one request: built before submit (its state is
// allocated then, never grown while decoding) and used afterwards only by the
// engine thread.
#pragma once

#include <cstdint>

namespace edgelm {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Whether `token` may come next when `left` more tokens may follow it (the
  // automaton refuses what it could not bring to an end within them).
  // End-of-generation tokens are allowed only where the output is complete.
  virtual bool allows(int32_t token, int left) = 0;
  // Copies logits[t] to out[t] for every token t that allows() accepts and
  // leaves the rest of `out` alone (the caller has filled it with
  // -infinity): refused tokens cost nothing where the automaton can refuse
  // whole groups of them at once. Returns how many tokens are allowed.
  virtual int mask(const float* logits, float* out, int n_vocab, int left) = 0;
  // Advances past `token` (which allows() accepted).
  virtual void accept(int32_t token) = 0;
  // The output is complete and nothing may follow it: end the answer.
  virtual bool done() const = 0;
};

}  // namespace edgelm
