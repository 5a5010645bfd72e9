#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace edgelm {
namespace {

SamplingParams plain(float temp) {
  SamplingParams p;
  p.temperature = temp;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

std::map<int32_t, int> histogram(Sampler& s, const std::vector<float>& logits, const SamplingParams& p, int n,
                                 uint64_t seed = 7) {
  Rng rng(seed);
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) h[s.sample(logits.data(), p, {}, rng)]++;
  return h;
}

TEST(Sampler, GreedyPicksTheArgmax) {
  Sampler s(5);
  std::vector<float> l = {0.1f, 2.0f, -1.0f, 1.9f, 0.0f};
  Rng rng(1);
  EXPECT_EQ(s.sample(l.data(), plain(0), {}, rng), 1);
  SamplingParams k1 = plain(1.0f);
  k1.top_k = 1;
  EXPECT_EQ(s.sample(l.data(), k1, {}, rng), 1);
}

TEST(Sampler, TemperatureOneFollowsTheDistribution) {
  Sampler s(4);
  const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  auto h = histogram(s, logits_of(probs), plain(1.0f), 40000);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(h[i] / 40000.0, probs[static_cast<size_t>(i)], 0.01) << i;
}

// A row long enough for the vector exp (and its scalar tail: 1003 is not a
// multiple of any vector width), on every ISA: the draw follows the
// softmax, and a token at -infinity (a constraint's refusal) is never drawn.
TEST(Sampler, TheVectorSoftmaxFollowsTheDistributionOnEveryIsa) {
  const int n = 1003;
  std::vector<double> probs(n, 0.1 / (n - 4));
  probs[0] = 0.4, probs[500] = 0.3, probs[1002] = 0.2;
  std::vector<float> l = logits_of(probs);
  l[3] = -INFINITY;
  for (kernels::Isa isa : kernels::supported_isas()) {
    Sampler s(n, isa);
    auto h = histogram(s, l, plain(1.0f), 40000);
    EXPECT_NEAR(h[0] / 40000.0, 0.4, 0.012) << kernels::isa_name(isa);
    EXPECT_NEAR(h[500] / 40000.0, 0.3, 0.012) << kernels::isa_name(isa);
    EXPECT_NEAR(h[1002] / 40000.0, 0.2, 0.012) << kernels::isa_name(isa);
    EXPECT_EQ(h.count(3), 0u) << kernels::isa_name(isa);
  }
}

// top-k and top-p keep exactly the sorted prefix their rules name, over
// rows of several shapes (flat, peaked, with ties): at temperature 100 the
// kept tokens are drawn near uniformly, so the set drawn is the set kept.
TEST(Sampler, TopKAndTopPKeepTheSortedPrefix) {
  std::mt19937 gen(5);
  for (int shape = 0; shape < 3; ++shape) {
    const int n = 2053;
    std::vector<float> l(n);
    std::normal_distribution<float> nd(0.0f, shape == 0 ? 1.0f : 4.0f);
    for (auto& v : l) v = nd(gen);
    if (shape == 2)
      for (auto& v : l) v = std::round(v);  // many equal logits: ties broken by id
    std::vector<int32_t> order(n);
    for (int i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return l[static_cast<size_t>(a)] > l[static_cast<size_t>(b)] || (l[static_cast<size_t>(a)] == l[static_cast<size_t>(b)] && a < b);
    });
    const double mx = l[static_cast<size_t>(order[0])];
    double total = 0;
    for (float v : l) total += std::exp(v - mx);
    Sampler s(n);
    auto drawn = [&](const SamplingParams& p) {
      std::set<int32_t> got;
      for (const auto& [tok, count] : histogram(s, l, p, 8000)) got.insert(tok);
      return got;
    };
    for (int k : {1, 7, 40, 150}) {
      SamplingParams p = plain(100.0f);
      p.top_k = k;
      const std::set<int32_t> want(order.begin(), order.begin() + k);
      if (shape != 2) EXPECT_EQ(drawn(p), want) << "shape " << shape << " top_k " << k;
      else EXPECT_EQ(drawn(p).size(), want.size()) << "shape " << shape << " top_k " << k;
    }
    for (float top_p : {0.1f, 0.5f, 0.9f}) {
      SamplingParams p = plain(100.0f);
      p.top_p = top_p;
      std::set<int32_t> want;
      double cum = 0;
      for (int32_t t : order) {
        if (cum >= top_p) break;
        cum += std::exp(l[static_cast<size_t>(t)] - mx) / total;
        want.insert(t);
      }
      if (want.size() > 150) continue;  // too many to be drawn near uniformly here
      EXPECT_EQ(drawn(p), want) << "shape " << shape << " top_p " << top_p;
    }
  }
}

TEST(Sampler, LowTemperatureSharpens) {
  Sampler s(3);
  auto h = histogram(s, logits_of({0.5, 0.3, 0.2}), plain(0.25f), 20000);
  // p^4 normalised: 0.0625, 0.0081, 0.0016 -> 0.86, 0.11, 0.02
  EXPECT_NEAR(h[0] / 20000.0, 0.862, 0.015);
  EXPECT_NEAR(h[2] / 20000.0, 0.022, 0.01);
}

TEST(Sampler, TopKTopPMinPTruncate) {
  Sampler s(5);
  const auto l = logits_of({0.4, 0.3, 0.15, 0.1, 0.05});
  SamplingParams p = plain(1.0f);
  p.top_k = 2;
  auto h = histogram(s, l, p, 10000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_NEAR(h[0] / 10000.0, 0.4 / 0.7, 0.02);
  p = plain(1.0f);
  p.top_p = 0.8f;  // 0.4 + 0.3 + 0.15 = 0.85 >= 0.8: three kept
  h = histogram(s, l, p, 10000);
  EXPECT_EQ(h.size(), 3u);
  p = plain(1.0f);
  p.min_p = 0.3f;  // keep p >= 0.12: three kept
  h = histogram(s, l, p, 10000);
  EXPECT_EQ(h.size(), 3u);
  EXPECT_EQ(h.count(3), 0u);
}

TEST(Sampler, TopPOverALargeVocabulary) {
  // A long tail: the growing sorted prefix must still find the nucleus.
  const int V = 50000;
  std::vector<float> l(V, 0.0f);
  for (int i = 0; i < 10; ++i) l[static_cast<size_t>(i * 4999)] = 12.0f;
  Sampler s(V);
  SamplingParams p = plain(1.0f);
  p.top_p = 0.5f;
  auto h = histogram(s, l, p, 2000);
  for (const auto& [tok, n] : h) EXPECT_EQ(tok % 4999, 0) << tok;
}

TEST(Sampler, PenaltiesFollowLlamaCppSemantics) {
  Sampler s(4);
  std::vector<float> l = {2.0f, 1.9f, -1.0f, -1.2f};
  const std::vector<int32_t> recent = {0, 0, 2};
  Rng rng(1);
  SamplingParams p = plain(0);
  p.repeat_penalty = 1.1f;  // 2.0 / 1.1 = 1.82 < 1.9
  EXPECT_EQ(s.sample(l.data(), p, recent, rng), 1);
  p = plain(0);
  p.frequency_penalty = 0.06f;  // 2.0 - 2 * 0.06 = 1.88 < 1.9
  EXPECT_EQ(s.sample(l.data(), p, recent, rng), 1);
  p.frequency_penalty = 0.04f;  // 1.92 > 1.9
  EXPECT_EQ(s.sample(l.data(), p, recent, rng), 0);
  p = plain(0);
  p.presence_penalty = 0.2f;
  EXPECT_EQ(s.sample(l.data(), p, recent, rng), 1);
  // A window that does not reach the repeated token does nothing.
  p.penalty_last_n = 1;
  EXPECT_EQ(s.sample(l.data(), p, recent, rng), 0);
  // The row itself is left untouched.
  EXPECT_FLOAT_EQ(l[0], 2.0f);
}

TEST(Sampler, SeedsReproduce) {
  Sampler s(100);
  std::vector<float> l(100);
  for (int i = 0; i < 100; ++i) l[static_cast<size_t>(i)] = std::sin(static_cast<float>(i));
  auto a = histogram(s, l, plain(1.0f), 500, 42);
  auto b = histogram(s, l, plain(1.0f), 500, 42);
  auto c = histogram(s, l, plain(1.0f), 500, 43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Sampler, LogprobsAreTheLogSoftmax) {
  Sampler s(4);
  const std::vector<double> probs = {0.6, 0.25, 0.1, 0.05};
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p) + 3.0));  // shifted: softmax is invariant
  TokenLogprob top[3];
  const float lp = s.logprobs(l.data(), 2, top);
  EXPECT_NEAR(lp, std::log(0.1), 1e-5);
  EXPECT_EQ(top[0].token, 0);
  EXPECT_NEAR(top[0].logprob, std::log(0.6), 1e-5);
  EXPECT_EQ(top[1].token, 1);
  EXPECT_EQ(top[2].token, 2);
}

TEST(Sampler, ValidateNamesTheField) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_NE(p.validate().message().find("temperature"), std::string::npos);
  p = SamplingParams();
  p.top_p = 0;
  EXPECT_NE(p.validate().message().find("top_p"), std::string::npos);
  p = SamplingParams();
  p.min_p = NAN;
  EXPECT_NE(p.validate().message().find("min_p"), std::string::npos);
  p = SamplingParams();
  p.frequency_penalty = 3;
  EXPECT_NE(p.validate().message().find("frequency_penalty"), std::string::npos);
  EXPECT_TRUE(SamplingParams().validate().ok());
}

// Allows tokens divisible by `mod` (none when mod is 0), counting masks.
class EveryNth final : public TokenConstraint {
 public:
  explicit EveryNth(int mod) : mod_(mod) {}
  bool allows(int32_t t, int) override { return mod_ > 0 && t % mod_ == 0; }
  int mask(const float* logits, float* out, int n, int left) override {
    ++masks;
    int k = 0;
    for (int32_t t = 0; t < n; ++t)
      if (allows(t, left)) out[t] = logits[t], ++k;
    return k;
  }
  void accept(int32_t) override {}
  bool done() const override { return false; }
  int masks = 0;

 private:
  int mod_;
};

TEST(Sampler, ConstraintChecksTheDrawAndMasksOnlyOnRefusal) {
  Sampler s(8);
  const std::vector<float> l = {0, 5, 1, 4, 2, 3, 0.5f, 9};
  SamplingParams greedy;
  greedy.temperature = 0;
  Rng rng(1);
  EveryNth one(1);
  EXPECT_EQ(s.sample(l.data(), greedy, {}, rng, &one, 10), 7);
  EXPECT_EQ(one.masks, 0) << "the draw was allowed: no mask";
  EveryNth even(2);
  EXPECT_EQ(s.sample(l.data(), greedy, {}, rng, &even, 10), 2 + 2) << "the best even token";
  EXPECT_EQ(even.masks, 1);
  SamplingParams warm;
  warm.temperature = 1.5f;
  warm.top_k = 0;
  warm.top_p = 1;
  warm.min_p = 0;
  EveryNth three(3);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(s.sample(l.data(), warm, {}, rng, &three, 10) % 3, 0);
  EveryNth none(0);
  EXPECT_EQ(s.sample(l.data(), warm, {}, rng, &none, 10), -1);
}

}  // namespace
}  // namespace edgelm
