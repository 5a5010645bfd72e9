// Turning a row of logits into the next token: penalties, top-k, top-p,
// min-p, temperature, then a seeded draw (or the argmax when temperature is
// 0). Buffers are sized by the vocabulary once; sampling allocates nothing.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "kernels/kernels.h"
#include "engine/token_constraint.h"

namespace edgelm {

struct SamplingParams {
  float temperature = 0.8f;   // <= 0: greedy
  int top_k = 40;             // <= 0: off
  float top_p = 0.95f;        // >= 1: off
  float min_p = 0.05f;        // <= 0: off
  float repeat_penalty = 1.0f;     // 1: off; divides positive logits, multiplies negative ones
  float presence_penalty = 0.0f;   // subtracted once from every token seen in the window
  float frequency_penalty = 0.0f;  // subtracted per occurrence in the window
  int penalty_last_n = 64;         // window of recent tokens (prompt and output) the penalties see
  uint64_t seed = 0;

  // Range checks with messages naming the field (for requests and flags).
  Status validate() const;
};

struct TokenLogprob {
  int32_t token;
  float logprob;
};

// splitmix64: a tiny, seedable, allocation-free generator; one per sequence.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }

 private:
  uint64_t s_;
};

class Sampler {
 public:
  // `isa`: the exponentials of a row's softmax run on that ISA's vector exp
  // (kernels::attn_exp_sum).
  explicit Sampler(int n_vocab, kernels::Isa isa = kernels::best_isa());
  // Bytes the sampler holds (counted by the memory plan).
  static size_t bytes_for(int n_vocab);

  // Samples from a row of n_vocab logits (left unchanged). `recent` holds
  // the sequence's latest tokens (the penalty window is its tail).
  int32_t sample(const float* logits, const SamplingParams& p, std::span<const int32_t> recent, Rng& rng);

  // The same under a constraint (`left`: tokens that may follow this one).
  // Fast path: the token drawn as above, kept if the constraint allows it
  // (one check, usually a few bytes). Otherwise a row of -infinity gets the
  // logits of the tokens the constraint allows, and the draw is repeated on
  // it. Returns -1 when the constraint allows nothing at all.
  int32_t sample(const float* logits, const SamplingParams& p, std::span<const int32_t> recent, Rng& rng,
                 TokenConstraint* c, int left);

  // log-softmax of a row of logits (the model's own distribution, before
  // penalties and truncation): fills `top` with the most likely tokens and
  // returns the logprob of `token`.
  float logprobs(const float* logits, int32_t token, std::span<TokenLogprob> top);

  struct Cand {
    int32_t id;
    float logit;
  };

 private:
  // Logits are bucketed by their distance below the largest: kBuckets
  // buckets over kLogitRange (a token further down has a probability under
  // e^-32 of the largest's at temperature 1 and is left out of the counts).
  static constexpr int kBuckets = 512;
  static constexpr float kLogitRange = 32.0f;
  static float bucket_of(float mx, float logit) { return (mx - logit) * (kBuckets / kLogitRange); }
  // Moves the candidates (from `from` on) whose bucket is at most b to the
  // front of that range; returns the end of them.
  size_t to_front(float mx, int b);
  size_t to_front_from(size_t from, float mx, int b);
  // top-p over unsorted candidates whose weights at temperature 1 (largest
  // logit mx) are in prob_ and sum to `sum`; false when it cannot decide.
  bool keep_top_p_by_buckets(float top_p, float mx, double sum);
  void apply_penalties(const SamplingParams& p, std::span<const int32_t> recent);
  // Sorts the candidates so that the first `n` are the n largest, descending.
  void sort_top(size_t n);

  // prob_[i] = exp((logit_i - max) / temp) for the first n candidates;
  // returns their sum and sets *max (when given) to the largest logit.
  float weights(size_t n, float temp, float* max = nullptr);
  // A candidate index drawn in proportion to prob_[0, n) (weights summing to `sum`).
  size_t draw(size_t n, float sum, Rng& rng) const;
  int n_vocab_;
  kernels::Isa isa_;
  std::vector<Cand> cand_;
  std::vector<float> prob_;
  std::vector<float> masked_;  // [n_vocab]: a row with the constraint's refusals masked
  size_t n_cand_ = 0;
};

}  // namespace edgelm
