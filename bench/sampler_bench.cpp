// Google Benchmark of drawing one token from a row of Qwen2-sized logits
// (151,936), as every decoding stream does once per step on the engine
// thread: greedy, the OpenAI defaults (temperature 1, no truncation: a
// softmax over the whole row), and the CLI's defaults (temperature 0.8,
// top-k 40, top-p 0.95, min-p 0.05).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "engine/sampler.h"

namespace edgelm {
namespace {

std::vector<float> logits_row(int n) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 2.5f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = nd(rng);
  return v;
}

void run(benchmark::State& st, const SamplingParams& p) {
  const int n = 151936;
  const auto row = logits_row(n);
  Sampler s(n);
  Rng rng(1);
  for (auto _ : st) benchmark::DoNotOptimize(s.sample(row.data(), p, {}, rng));
}

void bm_sample_greedy(benchmark::State& st) {
  SamplingParams p;
  p.temperature = 0;
  run(st, p);
}

// Temperature 1, no truncation: the OpenAI defaults.
SamplingParams untruncated() {
  SamplingParams p;
  p.temperature = 1;
  p.top_k = 0;
  p.top_p = 1;
  p.min_p = 0;
  return p;
}

void bm_sample_openai_defaults(benchmark::State& st) { run(st, untruncated()); }

void bm_sample_cli_defaults(benchmark::State& st) { run(st, SamplingParams{}); }

void bm_sample_top_p(benchmark::State& st) {
  SamplingParams p = untruncated();
  p.top_p = 0.9f;
  run(st, p);
}

BENCHMARK(bm_sample_greedy)->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_sample_openai_defaults)->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_sample_cli_defaults)->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_sample_top_p)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace edgelm
