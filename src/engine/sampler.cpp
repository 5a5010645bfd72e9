#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

namespace edgelm {

namespace {
bool by_logit(const Sampler::Cand& a, const Sampler::Cand& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}
}  // namespace

Status SamplingParams::validate() const {
  if (!std::isfinite(temperature) || temperature < 0 || temperature > 100)
    return make_error("temperature must be between 0 and 100, got {}", temperature);
  if (top_k < 0) return make_error("top_k must be >= 0, got {}", top_k);
  if (!std::isfinite(top_p) || top_p <= 0 || top_p > 1) return make_error("top_p must be in (0, 1], got {}", top_p);
  if (!std::isfinite(min_p) || min_p < 0 || min_p > 1) return make_error("min_p must be in [0, 1], got {}", min_p);
  if (!std::isfinite(repeat_penalty) || repeat_penalty <= 0 || repeat_penalty > 10)
    return make_error("repeat_penalty must be in (0, 10], got {}", repeat_penalty);
  if (!std::isfinite(presence_penalty) || presence_penalty < -2 || presence_penalty > 2)
    return make_error("presence_penalty must be between -2 and 2, got {}", presence_penalty);
  if (!std::isfinite(frequency_penalty) || frequency_penalty < -2 || frequency_penalty > 2)
    return make_error("frequency_penalty must be between -2 and 2, got {}", frequency_penalty);
  if (penalty_last_n < 0 || penalty_last_n > (1 << 20))
    return make_error("penalty_last_n must be between 0 and {}, got {}", 1 << 20, penalty_last_n);
  return Status::Ok();
}

Sampler::Sampler(int n_vocab, kernels::Isa isa)
    : n_vocab_(n_vocab),
      isa_(isa),
      cand_(static_cast<size_t>(n_vocab)),
      prob_(static_cast<size_t>(n_vocab)),
      masked_(static_cast<size_t>(n_vocab)) {}

size_t Sampler::bytes_for(int n_vocab) { return static_cast<size_t>(n_vocab) * (sizeof(Cand) + 2 * sizeof(float)); }

int32_t Sampler::sample(const float* logits, const SamplingParams& p, std::span<const int32_t> recent, Rng& rng,
                        TokenConstraint* c, int left) {
  const int32_t tok = sample(logits, p, recent, rng);
  if (c == nullptr || c->allows(tok, left)) return tok;
  std::fill(masked_.begin(), masked_.end(), -INFINITY);
  if (c->mask(logits, masked_.data(), n_vocab_, left) == 0) return -1;
  return sample(masked_.data(), p, recent, rng);
}

void Sampler::apply_penalties(const SamplingParams& p, std::span<const int32_t> recent) {
  const bool any = p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  if (!any || p.penalty_last_n == 0 || recent.empty()) return;
  const size_t n = std::min(recent.size(), static_cast<size_t>(p.penalty_last_n));
  const std::span<const int32_t> win = recent.subspan(recent.size() - n);
  // Count occurrences without a vocabulary-sized table: the window is small,
  // so each distinct token is found by a scan of what came before it.
  for (size_t i = 0; i < win.size(); ++i) {
    const int32_t t = win[i];
    if (t < 0 || t >= n_vocab_) continue;
    bool seen_before = false;
    for (size_t j = 0; j < i && !seen_before; ++j) seen_before = win[j] == t;
    if (seen_before) continue;
    int count = 0;
    for (size_t j = i; j < win.size(); ++j) count += win[j] == t;
    float& l = cand_[static_cast<size_t>(t)].logit;  // candidates are still in id order
    if (p.repeat_penalty != 1.0f) l = l > 0 ? l / p.repeat_penalty : l * p.repeat_penalty;
    l -= static_cast<float>(count) * p.frequency_penalty + p.presence_penalty;
  }
}

size_t Sampler::to_front(float mx, int b) { return to_front_from(0, mx, b); }

size_t Sampler::to_front_from(size_t from, float mx, int b) {
  size_t w = from;
  for (size_t i = from; i < n_cand_; ++i)
    if (bucket_of(mx, cand_[i].logit) < static_cast<float>(b + 1)) std::swap(cand_[w++], cand_[i]);
  return w;
}

bool Sampler::keep_top_p_by_buckets(float top_p, float mx, double sum) {
  // The probability mass by bucket of logit finds the bucket where the kept
  // mass reaches top_p. Every candidate above it is kept as it is, and only
  // that bucket is sorted to find where to stop: the kept set is the sorted
  // prefix the rule asks for, without sorting the vocabulary.
  double mass[kBuckets] = {};
  for (size_t i = 0; i < n_cand_; ++i)
    if (const float d = bucket_of(mx, cand_[i].logit); d < kBuckets) mass[static_cast<int>(d)] += prob_[i];
  const double target = static_cast<double>(top_p) * sum;
  double cum = 0;
  int b = 0;
  for (; b < kBuckets && cum + mass[b] < target; ++b) cum += mass[b];
  if (b == kBuckets) return false;  // rounding left the mass short: the caller sorts
  const size_t above = b > 0 ? to_front(mx, b - 1) : 0;
  const size_t end = to_front_from(above, mx, b);  // then bucket b itself
  std::sort(cand_.begin() + static_cast<long>(above), cand_.begin() + static_cast<long>(end), by_logit);
  size_t keep = above;
  while (keep < end && cum < target) cum += std::exp(static_cast<double>(cand_[keep++].logit - mx));
  n_cand_ = std::max<size_t>(keep, 1);
  return true;
}

void Sampler::sort_top(size_t n) {
  n = std::min(n, n_cand_);
  if (n < n_cand_) std::nth_element(cand_.begin(), cand_.begin() + static_cast<long>(n), cand_.begin() + static_cast<long>(n_cand_), by_logit);
  std::sort(cand_.begin(), cand_.begin() + static_cast<long>(n), by_logit);
}

int32_t Sampler::sample(const float* logits, const SamplingParams& p, std::span<const int32_t> recent, Rng& rng) {
  const bool penalties = (p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) &&
                         p.penalty_last_n > 0 && !recent.empty();
  if (p.temperature <= 0.0f && !penalties) {
    // Plain greedy: the argmax of the row, no copy.
    int32_t best = 0;
    for (int32_t i = 1; i < n_vocab_; ++i)
      if (logits[i] > logits[best]) best = i;
    return best;
  }
  n_cand_ = static_cast<size_t>(n_vocab_);
  for (int32_t i = 0; i < n_vocab_; ++i) cand_[static_cast<size_t>(i)] = {i, logits[i]};
  apply_penalties(p, recent);
  if (p.temperature <= 0.0f) {
    size_t best = 0;
    for (size_t i = 1; i < n_cand_; ++i)
      if (cand_[i].logit > cand_[best].logit) best = i;
    return cand_[best].id;
  }

  // top-k: keep the k largest, sorted. The buckets of logits below the
  // largest find how far down the k-th lies; only the candidates above that
  // are partitioned and sorted (a few hundred, not the vocabulary).
  size_t sorted = 0;
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n_cand_) {
    float mx = -INFINITY;
    for (size_t i = 0; i < n_cand_; ++i) mx = std::max(mx, cand_[i].logit);
    uint32_t count[kBuckets] = {};
    for (size_t i = 0; i < n_cand_; ++i)
      if (const float d = bucket_of(mx, cand_[i].logit); d < kBuckets) ++count[static_cast<int>(d)];
    size_t cum = 0;
    int b = 0;
    for (; b < kBuckets && cum + count[b] < static_cast<size_t>(p.top_k); ++b) cum += count[b];
    if (b < kBuckets) n_cand_ = to_front(mx, b);  // the k largest are in buckets 0..b
    sort_top(static_cast<size_t>(p.top_k));
    n_cand_ = static_cast<size_t>(p.top_k);
    sorted = n_cand_;
  }
  if (p.top_p < 1.0f) {
    // Probabilities at temperature 1 (llama.cpp truncates before it applies
    // the temperature), then the smallest prefix in descending order that
    // holds top_p of the mass.
    float mx = 0;
    const double sum = weights(n_cand_, 1.0f, &mx);
    // Unsorted (no top-k before it): by buckets; else the sorted prefix.
    if (sorted == n_cand_ || !keep_top_p_by_buckets(p.top_p, mx, sum)) {
      size_t want = std::max<size_t>(sorted, 64);
      for (;;) {
        want = std::min(want, n_cand_);
        if (sorted < want) {
          sort_top(want);
          sorted = want;
        }
        double cum = 0;
        size_t keep = 0;
        while (keep < sorted && cum < p.top_p) cum += std::exp(cand_[keep++].logit - mx) / sum;
        if (cum >= p.top_p || sorted == n_cand_) {
          n_cand_ = std::max<size_t>(keep, 1);
          break;
        }
        want *= 8;
      }
    }
  }
  if (p.min_p > 0.0f) {
    float mx = -INFINITY;
    for (size_t i = 0; i < n_cand_; ++i) mx = std::max(mx, cand_[i].logit);
    // p_i >= min_p * p_max  <=>  logit_i >= max + log(min_p)
    const float floor = mx + std::log(p.min_p);
    size_t w = 0;
    for (size_t i = 0; i < n_cand_; ++i)
      if (cand_[i].logit >= floor) cand_[w++] = cand_[i];
    n_cand_ = std::max<size_t>(w, 1);
  }
  return cand_[draw(n_cand_, weights(n_cand_, p.temperature), rng)].id;
}

float Sampler::weights(size_t n, float temp, float* max) {
  float mx = -INFINITY;
  const float inv_t = 1.0f / temp;
  for (size_t i = 0; i < n; ++i) {
    mx = std::max(mx, cand_[i].logit);
    prob_[i] = cand_[i].logit * inv_t;
  }
  if (max) *max = mx;
  return kernels::attn_exp_sum(isa_, prob_.data(), static_cast<int>(n), mx * inv_t);
}

size_t Sampler::draw(size_t n, float sum, Rng& rng) const {
  double r = rng.uniform() * static_cast<double>(sum);
  size_t last = 0;  // the last candidate with any weight: where rounding leaves the draw
  for (size_t i = 0; i < n; ++i) {
    if (prob_[i] <= 0) continue;
    r -= prob_[i];
    last = i;
    if (r < 0) return i;
  }
  return last;
}

float Sampler::logprobs(const float* logits, int32_t token, std::span<TokenLogprob> top) {
  float mx = -INFINITY;
  for (int32_t i = 0; i < n_vocab_; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int32_t i = 0; i < n_vocab_; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  const float lse = mx + static_cast<float>(std::log(sum));
  if (!top.empty()) {
    n_cand_ = static_cast<size_t>(n_vocab_);
    for (int32_t i = 0; i < n_vocab_; ++i) cand_[static_cast<size_t>(i)] = {i, logits[i]};
    sort_top(top.size());
    for (size_t i = 0; i < top.size() && i < n_cand_; ++i) top[i] = {cand_[i].id, cand_[i].logit - lse};
  }
  return logits[token] - lse;
}

}  // namespace edgelm
