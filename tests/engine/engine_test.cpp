#include "engine/engine.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "alloc_counter.h"
#include "engine/engine_test_util.h"
#include "testutil.h"

namespace edgelm {
namespace {

using test::generate;
using test::greedy;
using test::make_engine;
using test::synth_model;

std::string piece_text(const Engine& e, const std::vector<int32_t>& prompt, const std::vector<int32_t>& out) {
  std::string s;
  for (size_t i = 1; i < prompt.size(); ++i) s += e.tokenizer().token_piece(prompt[i]);
  for (int32_t t : out) s += e.tokenizer().token_piece(t);
  return s;
}

TEST(EngineShared, Stories260KGreedyMatchesLlamaCpp) {
  EDGELM_REQUIRE_SHARED(model, "stories260K.gguf");
  EDGELM_REQUIRE_SHARED(ref_path, "stories260K.greedy.json");
  auto ref = nlohmann::json::parse(std::ifstream(ref_path));
  auto e = make_engine(model, 2, 512);
  ASSERT_TRUE(e);
  for (auto& [prompt_text, want] : ref.items()) {
    auto prompt = e->tokenizer().encode(prompt_text, true, false);
    auto out = generate(*e, prompt, greedy(200));
    EXPECT_EQ(out.size(), 200u);
    EXPECT_EQ(piece_text(*e, prompt, out), want.get<std::string>()) << prompt_text;
  }
}

TEST(EngineShared, Stories260KQuantizedFirst32Tokens) {
  EDGELM_REQUIRE_SHARED(ref_path, "stories260K.llamacpp.json");
  auto ref = nlohmann::json::parse(std::ifstream(ref_path));
  for (auto& [file, r] : ref.items()) {
    EDGELM_REQUIRE_SHARED(model, file);
    auto e = make_engine(model, 1, 256);
    ASSERT_TRUE(e);
    auto prompt = r["prompt_tokens"].get<std::vector<int32_t>>();
    EXPECT_EQ(e->tokenizer().encode(r["prompt"].get<std::string>(), true, false), prompt) << file;
    GenerateParams p = greedy(32);
    p.top_logprobs = 5;
    const SlotRef held = e->try_acquire();
    const int slot = held.slot;
    ASSERT_TRUE(e->submit(held, prompt, p).ok());
    while (e->finish(slot) == Finish::None) e->wait_for(slot, 1 << 30, std::chrono::steady_clock::now() + std::chrono::seconds(5));
    auto want = r["tokens"].get<std::vector<int32_t>>();
    ASSERT_EQ(e->wait_for(slot, 0, std::chrono::steady_clock::now()), 32) << file;
    for (int i = 0; i < 32; ++i) {
      ASSERT_EQ(e->output_token(slot, i), want[static_cast<size_t>(i)]) << file << " token " << i;
      TokenLogprob top[5];
      const float lp = e->output_logprob(slot, i, top);
      const double ref_lp = r["top5_logprobs"][static_cast<size_t>(i)][0][1].get<double>();
      EXPECT_NEAR(lp, ref_lp, 0.05) << file << " token " << i;
      EXPECT_EQ(top[0].token, want[static_cast<size_t>(i)]);
    }
    e->release(held);
  }
}

// types/greedy.json lists llama.cpp's top-5 log-probabilities per emitted
// piece of text: a token that ends inside a UTF-8 character (a byte token)
// has no entry of its own. The first entry belongs to the first generated
// token whose greedy choice is its top-1 id; we generate up to there, check
// the token ids on the way, and return, for each of that step's top 5, our
// logprob minus llama.cpp's (NaN when the token is not in our top 20).
std::vector<double> first_entry_deviation(const std::string& file, const nlohmann::json& r, AttnMath attn) {
  std::vector<double> dev;
  auto e = make_engine(file, 1, 128, 2, DType::F16, 64, attn);
  if (!e) return dev;
  const auto prompt = r["prompt_tokens"].get<std::vector<int32_t>>();
  const auto want = r["tokens"].get<std::vector<int32_t>>();
  const int32_t entry_top1 = r["top5_logprobs"][0][0][0].get<int32_t>();
  int step = 0;
  while (step < static_cast<int>(want.size()) && want[static_cast<size_t>(step)] != entry_top1) ++step;
  EXPECT_LT(step, 4) << file << ": the first logprob entry matches none of the first tokens";
  if (step >= 4) return dev;
  GenerateParams p = greedy(step + 1);
  p.top_logprobs = 20;
  const SlotRef ref = e->try_acquire();
  const int slot = ref.slot;
  EXPECT_TRUE(e->submit(ref, prompt, p).ok());
  while (e->finish(slot) == Finish::None)
    e->wait_for(slot, 1 << 30, std::chrono::steady_clock::now() + std::chrono::seconds(5));
  EXPECT_EQ(e->wait_for(slot, 0, std::chrono::steady_clock::now()), step + 1) << file;
  for (int i = 0; i <= step; ++i) EXPECT_EQ(e->output_token(slot, i), want[static_cast<size_t>(i)]) << file << " token " << i;
  TokenLogprob top[20];
  e->output_logprob(slot, step, top);
  for (const auto& pair : r["top5_logprobs"][0]) {
    const int32_t id = pair[0].get<int32_t>();
    double d = std::nan("");
    for (const auto& t : top)
      if (t.token == id) d = t.logprob - pair[1].get<double>();
    EXPECT_FALSE(std::isnan(d)) << file << ": token " << id << " not among our top 20";
    dev.push_back(d);
  }
  e->release(ref);
  return dev;
}

// With --attn-math llamacpp the engine rounds attention as llama.cpp's CPU
// flash attention does (query in f16, running output in f16). The files'
// weights are random and these tiny models are chaotic at the rounding
// level: llama.cpp itself moves these logprobs by up to 0.12 between its
// flash-attention on and off, and two of its builds differ by 0.02 on the
// Q4_1 file. Rounded the same way, most files agree with its figures to 1e-5
// (the arithmetic is the same); on the others, a value that landed on the
// other side of a rounding boundary (8-bit activation quantization, f16)
// because the sums ran in another order moves the logprobs by up to 0.08.
// Which files those are depends on the kernels' summation order (AVX-512,
// AVX2 and scalar each flip different ones: 6 or 7 of the 12 files agree
// to 1e-5 with AVX-512; with the AVX2 kernels, seen on an AMD EPYC without
// AVX-512, 4 are within 1e-3). So: 0.05 on the float files, 0.1 on every file, and at
// least 4 files with all five within 1e-3 (without the f16 rounding of the
// running output, none of them is).
TEST(EngineShared, EveryTensorTypeFirstTokenAndTop5) {
  EDGELM_REQUIRE_SHARED(ref_path, "types/greedy.json");
  auto ref = nlohmann::json::parse(std::ifstream(ref_path));
  ASSERT_GE(ref.size(), 12u);
  size_t exact_files = 0;
  for (auto& [file, r] : ref.items()) {
    EDGELM_REQUIRE_SHARED(model, "types/" + file);
    const bool float_weights = file.find("F16") != std::string::npos;
    const auto dev = first_entry_deviation(model, r, AttnMath::LlamaCpp);
    ASSERT_EQ(dev.size(), 5u) << file;
    double worst = 0;
    for (double d : dev) {
      EXPECT_LE(std::fabs(d), float_weights ? 0.05 : 0.1) << file;
      worst = std::isnan(d) ? INFINITY : std::max(worst, std::fabs(d));
    }
    exact_files += worst <= 1e-3;
  }
  EXPECT_GE(exact_files, 4u) << exact_files << " of " << ref.size() << " files within 1e-3 of llama.cpp";
}

// The default f32 attention rounds less than llama.cpp does, so on these
// chaotic files it differs from its figures by more: up to 0.19 measured.
// The same tokens, the top-1 logprob within 0.15 and the rest within 0.25
// (0.05 on the float files).
TEST(EngineShared, EveryTensorTypeFirstTokenAndTop5F32Attention) {
  EDGELM_REQUIRE_SHARED(ref_path, "types/greedy.json");
  auto ref = nlohmann::json::parse(std::ifstream(ref_path));
  ASSERT_GE(ref.size(), 12u);
  for (auto& [file, r] : ref.items()) {
    EDGELM_REQUIRE_SHARED(model, "types/" + file);
    const bool float_weights = file.find("F16") != std::string::npos;
    const auto dev = first_entry_deviation(model, r, AttnMath::F32);
    ASSERT_EQ(dev.size(), 5u) << file;
    for (size_t i = 0; i < dev.size(); ++i) {
      EXPECT_LE(std::fabs(dev[i]), float_weights ? 0.05 : i == 0 ? 0.15 : 0.25) << file << " entry " << i;
    }
  }
}

// Four requests decoding together give exactly what each gives alone.
TEST(Engine, ConcurrentSlotsMatchSolo) {
  auto path = synth_model("tiny-qwen2", "Q8_0");
  auto e = make_engine(path, 4, 128);
  ASSERT_TRUE(e);
  std::vector<std::vector<int32_t>> prompts = {{1, 5, 9}, {1, 100, 200, 300, 400, 17}, {1, 42}, {1, 7, 7, 7, 7}};
  std::vector<std::vector<int32_t>> solo;
  GenerateParams p = greedy(24);
  p.ignore_eos = true;
  for (auto& pr : prompts) solo.push_back(generate(*e, pr, p));
  std::vector<std::vector<int32_t>> together(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i)
    threads.emplace_back([&, i] { together[i] = generate(*e, prompts[i], p); });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(together[i], solo[i]) << "request " << i;
}

// The same with random sampling (top-k, top-p, min-p, a seed): a step's rows
// are drawn at once by the pool's threads, each with its own sampler, and
// every request's tokens still come from its own generator alone.
TEST(Engine, ConcurrentSampledSlotsMatchSolo) {
  auto path = synth_model("tiny-qwen2", "Q8_0");
  auto e = make_engine(path, 4, 128, /*threads=*/2);
  ASSERT_TRUE(e);
  std::vector<std::vector<int32_t>> prompts = {{1, 5, 9}, {1, 100, 200, 300, 400, 17}, {1, 42}, {1, 7, 7, 7, 7}};
  GenerateParams p = greedy(32);
  p.ignore_eos = true;
  p.sampling.temperature = 1.2f;
  p.sampling.top_k = 40;
  p.sampling.top_p = 0.95f;
  p.sampling.min_p = 0.01f;
  p.sampling.seed = 7;
  std::vector<std::vector<int32_t>> solo;
  for (auto& pr : prompts) solo.push_back(generate(*e, pr, p));
  for (int round = 0; round < 3; ++round) {
    std::vector<SlotRef> refs;
    for (size_t i = 0; i < prompts.size(); ++i) refs.push_back(e->try_acquire());
    std::vector<std::vector<int32_t>> together(prompts.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < prompts.size(); ++i)
      threads.emplace_back([&, i] { together[i] = generate(*e, prompts[i], p, nullptr, refs[i]); });
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(together[i], solo[i]) << "round " << round << ", request " << i;
  }
}

// The idle fit (the promises' yardstick) learns only from steps taken with
// at most one slot busy; the step fit learns from every step.
TEST(Engine, TheIdleStepFitCountsOnlyStepsTakenAlone) {
  auto path = synth_model("tiny-qwen2", "Q8_0");
  auto e = make_engine(path, 4, 128);
  ASSERT_TRUE(e);
  GenerateParams p = greedy(16);
  p.ignore_eos = true;
  const EngineStats s0 = e->stats();
  generate(*e, {1, 5, 9}, p);  // alone: every step counts for both
  const EngineStats s1 = e->stats();
  EXPECT_GT(s1.step_model.samples, s0.step_model.samples);
  EXPECT_EQ(s1.idle_model.samples - s0.idle_model.samples, s1.step_model.samples - s0.step_model.samples);
  EXPECT_DOUBLE_EQ(s1.step_model.lone, s1.idle_model.lone) << "both promise against the idle one-token step";
  EXPECT_GT(s1.idle_model.lone, 0);
  // Four at once, started before the engine may run them: most steps have
  // several slots busy.
  std::vector<SlotRef> refs;
  for (int i = 0; i < 4; ++i) refs.push_back(e->try_acquire());
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] { generate(*e, {1, 7, static_cast<int32_t>(20 + i)}, p, nullptr, refs[static_cast<size_t>(i)]); });
  for (auto& t : threads) t.join();
  const EngineStats s2 = e->stats();
  const uint64_t all = s2.step_model.samples - s1.step_model.samples;
  const uint64_t alone = s2.idle_model.samples - s1.idle_model.samples;
  EXPECT_GE(all, 16u);
  EXPECT_LT(alone, all / 2) << "steps with four slots busy counted as taken alone";
}

// A lone stream's step is what one-token steps measured, not the line
// through every step: where a step has a floor (a one-token step reads
// every weight; a padded step sleeps to 20 ms) and a prompt's tokens cost
// 2 ms each beyond it, the line's one-token figure is well below any step
// measured.
TEST(Engine, ALoneStepIsTheMeasuredOneTokenStep) {
  const StepSample calib[2] = {{1, 0.020}, {64, 0.128}};
  std::vector<StepSample> recent;
  for (int i = 0; i < 3; ++i) recent.push_back({1, 0.020 + 0.001 * i});
  for (int i = 0; i < 4; ++i) recent.push_back({11, 0.022});
  for (int i = 0; i < 3; ++i) recent.push_back({40, 0.080});
  StepModel line;  // the least-squares line through those points
  {
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    auto add = [&](const StepSample& p) {
      sw += 1;
      sx += p.tokens;
      sy += p.seconds;
      sxx += 1.0 * p.tokens * p.tokens;
      sxy += p.tokens * p.seconds;
    };
    for (const auto& p : calib) add(p);
    for (const auto& p : recent) add(p);
    line.b = (sw * sxy - sx * sy) / (sw * sxx - sx * sx);
    line.a = (sy - line.b * sx) / sw;
  }
  ASSERT_LT(line.predict(1), 0.015) << "the case this rule is for: the line passes below the one-token steps";
  EXPECT_DOUBLE_EQ(lone_step_of(calib, recent, line), 0.021) << "the median of the four one-token steps";
  // With no one-token step measured, the line is all there is.
  const StepSample big[2] = {{64, 0.240}, {32, 0.130}};
  EXPECT_DOUBLE_EQ(lone_step_of(big, {}, line), line.predict(1));
}

// Each worker thread owns a slice of the planned attention scratch.
TEST(Engine, MoreThreadsThanThePlanHasScratchForIsAnError) {
  auto m = Model::load(synth_model("tiny-llama", "Q8_0"));
  ASSERT_TRUE(m.ok()) << m.message();
  auto tok = tokenizer::Tokenizer::from_gguf((*m)->file);
  ASSERT_TRUE(tok.ok());
  PlanOptions po;
  po.slots = 1;
  po.ctx = 32;
  po.threads = 1;
  auto plan = make_plan((*m)->config, (*m)->weights, po, Budget{1ull << 40, "test"});
  ASSERT_TRUE(plan.ok());
  EngineOptions eo;
  eo.threads = 2;
  auto e = Engine::create(std::move(m).value(), std::move(tok).value(), *plan, eo);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("attention scratch for 1"), std::string::npos) << e.message();
}

TEST(Engine, SlotsAreFiniteAndReusable) {
  auto e = make_engine(synth_model("tiny-llama", "F16"), 2, 64);
  ASSERT_TRUE(e);
  const SlotRef a = e->try_acquire(), b = e->try_acquire();
  EXPECT_GE(a.slot, 0);
  EXPECT_GE(b.slot, 0);
  EXPECT_NE(a.slot, b.slot);
  EXPECT_EQ(e->try_acquire().slot, -1);
  EXPECT_EQ(e->active_slots(), 2);
  e->release(a);
  const SlotRef a2 = e->try_acquire();
  EXPECT_EQ(a2.slot, a.slot);
  EXPECT_NE(a2.gen, a.gen);
  e->release(a2);
  e->release(b);
  EXPECT_EQ(e->active_slots(), 0);
}

TEST(Engine, CancelFreesTheSlot) {
  // Steps padded to 2 ms: 200 tokens take 0.4 s, so the cancel lands first
  // (a fast machine made all 200 before it).
  auto e = make_engine(synth_model("tiny-llama", "Q4_0"), 1, 256, 2, DType::F16, 64, AttnMath::F32, 0.002);
  ASSERT_TRUE(e);
  GenerateParams p = greedy(200);
  p.ignore_eos = true;
  const SlotRef ref = e->try_acquire();
  const int slot = ref.slot;
  ASSERT_TRUE(e->submit(ref, std::vector<int32_t>{1, 2, 3}, p).ok());
  EXPECT_GE(e->wait_for(slot, 2, std::chrono::steady_clock::now() + std::chrono::seconds(10)), 3);
  e->cancel(ref);
  e->wait_for(slot, 1 << 30, std::chrono::steady_clock::now() + std::chrono::seconds(10));
  EXPECT_EQ(e->finish(slot), Finish::Cancelled);
  EXPECT_LT(e->wait_for(slot, 0, std::chrono::steady_clock::now()), 200);
  e->release(ref);
  EXPECT_EQ(e->active_slots(), 0);
  // Releasing a running slot cancels it and waits for the engine.
  const SlotRef s2 = e->try_acquire();
  ASSERT_EQ(s2.slot, slot);
  ASSERT_TRUE(e->submit(s2, std::vector<int32_t>{1, 2, 3}, p).ok());
  e->release(s2);
  EXPECT_EQ(e->active_slots(), 0);
  auto out = generate(*e, {1, 4}, greedy(5));
  EXPECT_EQ(out.size(), 5u);
}

TEST(Engine, LengthLimitsAndContextClamp) {
  auto e = make_engine(synth_model("tiny-llama", "Q8_0"), 1, 32);
  ASSERT_TRUE(e);
  GenerateParams p = greedy(1000);
  p.ignore_eos = true;
  Finish fin;
  std::vector<int32_t> prompt(20, 5);
  prompt[0] = 1;
  auto out = generate(*e, prompt, p, &fin);
  EXPECT_EQ(fin, Finish::Length);
  EXPECT_EQ(out.size(), 12u);  // 32 - 20
  auto refused = [&](std::vector<int32_t> tokens, const GenerateParams& gp) {
    const SlotRef r = e->try_acquire();
    const bool ok = e->submit(r, tokens, gp).ok();
    e->release(r);
    return !ok;
  };
  EXPECT_TRUE(refused(std::vector<int32_t>(32, 1), p));
  EXPECT_TRUE(refused({}, p));
  EXPECT_TRUE(refused({1, 99999}, p));
  GenerateParams bad = p;
  bad.sampling.top_p = 2;
  EXPECT_TRUE(refused({1}, bad));
  EXPECT_EQ(e->active_slots(), 0);
}

TEST(Engine, SeededSamplingReproduces) {
  auto e = make_engine(synth_model("tiny-qwen3", "Q4_K_M"), 2, 128);
  ASSERT_TRUE(e);
  GenerateParams p;
  p.sampling.temperature = 1.0f;
  p.sampling.top_k = 0;
  p.sampling.top_p = 1.0f;
  p.sampling.min_p = 0;
  p.sampling.seed = 1234;
  p.max_tokens = 30;
  p.ignore_eos = true;
  auto a = generate(*e, {1, 2, 3}, p);
  auto b = generate(*e, {1, 2, 3}, p);
  EXPECT_EQ(a, b);
  p.sampling.seed = 99;
  auto c = generate(*e, {1, 2, 3}, p);
  EXPECT_NE(a, c);
}

// After warm-up, steady decoding allocates nothing anywhere in the process.
TEST(Engine, DecodingAllocatesNothing) {
  auto e = make_engine(synth_model("tiny-qwen2", "Q4_0"), 2, 512);
  ASSERT_TRUE(e);
  GenerateParams p = greedy(400);
  p.ignore_eos = true;
  p.top_logprobs = 5;
  p.sampling.repeat_penalty = 1.1f;
  const SlotRef r0 = e->try_acquire(), r1 = e->try_acquire();
  const int s0 = r0.slot, s1 = r1.slot;
  ASSERT_TRUE(e->submit(r0, std::vector<int32_t>{1, 2, 3, 4}, p).ok());
  p.sampling.temperature = 0.7f;
  ASSERT_TRUE(e->submit(r1, std::vector<int32_t>{1, 9, 8}, p).ok());
  e->wait_for(s0, 20, std::chrono::steady_clock::now() + std::chrono::seconds(10));
  e->wait_for(s1, 20, std::chrono::steady_clock::now() + std::chrono::seconds(10));
  const uint64_t before = test::allocations();
  const int n0 = e->wait_for(s0, 300, std::chrono::steady_clock::now() + std::chrono::seconds(30));
  const uint64_t after = test::allocations();
  EXPECT_GT(n0, 300);
  EXPECT_EQ(after - before, 0u) << "allocations during ~280 decode steps";
  e->release(r0);
  e->release(r1);
}

// A whole request that starts from copied rows (the pinned prefix, another
// slot) allocates nothing either: submit, copy, prefill, decode, release.
TEST(Engine, RequestsThatCopyAllocateNothing) {
  std::vector<int32_t> sys = {1};
  for (int i = 0; i < 40; ++i) sys.push_back(5 + i);
  auto e = make_engine(synth_model("tiny-qwen2", "Q4_0"), 3, 256, 2, DType::F16, 16, AttnMath::F32, 0, sys);
  ASSERT_TRUE(e);
  std::vector<int32_t> prompt = sys;
  for (int i = 0; i < 10; ++i) prompt.push_back(60 + i);
  GenerateParams p = greedy(20);
  p.ignore_eos = true;
  auto run = [&](int slot, int copy_from) {
    p.copy_from = copy_from;
    const SlotRef r = e->try_acquire(slot);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(e->submit(r, prompt, p).ok());
    int n = 0;
    while (e->finish(slot) == Finish::None) n = e->wait_for(slot, n, std::chrono::steady_clock::now() + std::chrono::seconds(10));
    e->release(r);
  };
  run(1, kPinnedPrefix);  // warm-up
  const uint64_t before = test::allocations();
  run(2, kPinnedPrefix);
  run(0, 2);
  const uint64_t after = test::allocations();
  EXPECT_EQ(after - before, 0u);
  EXPECT_EQ(e->reused_tokens(0), static_cast<int>(prompt.size()) - 1);
}

// A late cancel or release through a reference whose slot has since been
// released and taken again leaves the new request alone.
TEST(Engine, StaleReferencesCannotTouchTheNextRequest) {
  auto e = make_engine(synth_model("tiny-llama", "Q8_0"), 1, 256);
  ASSERT_TRUE(e);
  GenerateParams p = greedy(40);
  p.ignore_eos = true;
  const SlotRef old = e->try_acquire();
  ASSERT_TRUE(e->submit(old, std::vector<int32_t>{1, 2, 3}, p).ok());
  e->release(old);  // cancels and frees
  const SlotRef now = e->try_acquire();
  ASSERT_EQ(now.slot, old.slot);
  ASSERT_TRUE(e->submit(now, std::vector<int32_t>{1, 5, 6}, p).ok());
  e->cancel(old);   // stale: must not end `now`
  e->release(old);  // stale: must not free `now`
  EXPECT_FALSE(e->submit(old, std::vector<int32_t>{1}, p).ok());
  EXPECT_EQ(e->state(now.slot) == Engine::SlotState::Free, false);
  while (e->finish(now.slot) == Finish::None)
    e->wait_for(now.slot, 1 << 30, std::chrono::steady_clock::now() + std::chrono::seconds(10));
  EXPECT_EQ(e->finish(now.slot), Finish::Length);
  EXPECT_EQ(e->wait_for(now.slot, 0, std::chrono::steady_clock::now()), 40);
  e->release(now);
  EXPECT_EQ(e->active_slots(), 0);
}

// The slots of `refs` in the order their first token appeared (polled; up
// to 30 s).
std::vector<int> first_token_slots(Engine& e, const std::vector<SlotRef>& refs) {
  std::vector<int> order;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (order.size() < refs.size() && std::chrono::steady_clock::now() < end) {
    for (const SlotRef& r : refs)
      if (std::find(order.begin(), order.end(), r.slot) == order.end() &&
          e.wait_for(r.slot, 0, std::chrono::steady_clock::now()) > 0)
        order.push_back(r.slot);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return order;
}

// Prompts are prefilled in the order they were submitted, whatever their
// slots: a later prompt in a lower slot does not go first.
TEST(Engine, PromptsArePrefilledInSubmissionOrder) {
  // Steps of at least 3 ms and 8 tokens: a 60-token prompt takes 8 steps.
  auto e = make_engine(synth_model("tiny-llama", "Q8_0"), 3, 256, 1, DType::F16, 8, AttnMath::F32, 0.003);
  ASSERT_TRUE(e);
  GenerateParams p = greedy(1);
  p.ignore_eos = true;
  const SlotRef r0 = e->try_acquire(), r1 = e->try_acquire(), r2 = e->try_acquire();
  std::vector<int32_t> prompt(60, 7);
  prompt[0] = 1;
  // Submitted highest slot first: the old lowest-slot-first order would
  // finish slot 0's prompt first.
  ASSERT_TRUE(e->submit(r2, prompt, p).ok());
  ASSERT_TRUE(e->submit(r1, prompt, p).ok());
  ASSERT_TRUE(e->submit(r0, prompt, p).ok());
  EXPECT_EQ(first_token_slots(*e, {r0, r1, r2}), (std::vector<int>{r2.slot, r1.slot, r0.slot}));
  for (const SlotRef& r : {r0, r1, r2}) e->release(r);
}

// A more urgent class's prompts go first, but a less urgent prompt past its
// promotion time (GenerateParams::promote_after_s) is served as the most
// urgent class, in submission order: it is not starved by urgent prompts
// that keep coming. Without promotion it waits for them all.
std::vector<int> first_token_order(double promote_after_s) {
  // Steps of at least 3 ms and 8 tokens: a 60-token prompt takes 8 steps.
  auto e = make_engine(synth_model("tiny-llama", "Q8_0"), 3, 256, 1, DType::F16, 8, AttnMath::F32, 0.003);
  EXPECT_TRUE(e);
  if (!e) return {};
  std::vector<int32_t> prompt(60, 7);
  prompt[0] = 1;
  GenerateParams chat = greedy(1), sensor = greedy(1);
  chat.ignore_eos = sensor.ignore_eos = true;
  chat.priority = 1;
  chat.promote_after_s = promote_after_s;
  sensor.priority = 0;
  const SlotRef c = e->try_acquire(), a = e->try_acquire(), b = e->try_acquire();
  EXPECT_TRUE(e->submit(c, prompt, chat).ok());
  EXPECT_TRUE(e->submit(a, prompt, sensor).ok());
  EXPECT_TRUE(e->submit(b, prompt, sensor).ok());
  const std::vector<int> order = first_token_slots(*e, {c, a, b});
  for (const SlotRef& r : {c, a, b}) e->release(r);
  // As classes: 1 for the chat prompt, 0 for a sensor's.
  std::vector<int> classes;
  for (int slot : order) classes.push_back(slot == c.slot ? 1 : 0);
  return classes;
}

TEST(Engine, UrgentPromptsGoFirstUntilALessUrgentOneIsPromoted) {
  EXPECT_EQ(first_token_order(0), (std::vector<int>{0, 0, 1})) << "no promotion: the sensors' prompts first";
  // Promoted a millisecond after submission: the chat prompt, submitted
  // first, is then the first of the most urgent class.
  EXPECT_EQ(first_token_order(0.001), (std::vector<int>{1, 0, 0}));
}

}  // namespace
}  // namespace edgelm

namespace edgelm {
namespace {

// A released slot keeps its tokens and KV: a prompt that starts with them
// computes only the rest, and greedy output is the same as computing it all.
void expect_reuse_matches_cold(const std::string& model, int step_tokens) {
  auto warm = make_engine(model, 1, 256, 1, DType::F16, step_tokens);
  auto cold = make_engine(model, 1, 256, 1, DType::F16, step_tokens);
  ASSERT_TRUE(warm && cold);
  const int n_vocab = warm->model().config.n_vocab;
  std::vector<int32_t> first = {1};
  for (int i = 0; i < 40; ++i) first.push_back(static_cast<int32_t>((i * 37 + 11) % (n_vocab - 3) + 3));
  GenerateParams p = greedy(12);
  p.ignore_eos = true;
  const std::vector<int32_t> answer = generate(*warm, first, p);
  // The next turn: the whole first exchange, then more.
  std::vector<int32_t> second = first;
  second.insert(second.end(), answer.begin(), answer.end());
  for (int i = 0; i < 9; ++i) second.push_back(static_cast<int32_t>((i * 53 + 5) % (n_vocab - 3) + 3));
  const int cached = warm->cached_prefix(0, second);
  // Everything but the last answer token (sampled, never fed back) is cached.
  EXPECT_EQ(cached, static_cast<int>(first.size() + answer.size()) - 1);
  GenerateParams pr = p;
  pr.reuse = cached;
  const uint64_t prefilled_before = warm->stats().prompt_tokens;
  const std::vector<int32_t> reused = generate(*warm, second, pr);
  // Only the part after the cached prefix was computed.
  EXPECT_EQ(warm->stats().prompt_tokens - prefilled_before, second.size() - static_cast<size_t>(cached));
  const std::vector<int32_t> computed = generate(*cold, second, p);
  EXPECT_EQ(reused, computed) << model;
  // A claim beyond what the slot holds is refused.
  GenerateParams bad = p;
  bad.reuse = 5;
  const SlotRef r = cold->try_acquire();
  std::vector<int32_t> other(20, 4);
  other[0] = 1;
  EXPECT_FALSE(cold->submit(r, other, bad).ok());
  cold->release(r);
}

TEST(EngineReuse, GreedyOutputWithReuseEqualsComputingItAll) {
  expect_reuse_matches_cold(synth_model("tiny-qwen2", "Q4_0"), 64);
  expect_reuse_matches_cold(synth_model("tiny-llama", "Q8_0"), 8);
}

TEST(EngineReuseShared, Stories260KWithReuseEqualsComputingItAll) {
  EDGELM_REQUIRE_SHARED(model, "stories260K.gguf");
  expect_reuse_matches_cold(model, 64);
}

TEST(EngineReuse, KeepCacheFalseLeavesNothing) {
  auto e = make_engine(synth_model("tiny-llama", "Q8_0"), 1, 128, 1);
  ASSERT_TRUE(e);
  GenerateParams p = greedy(4);
  p.ignore_eos = true;
  p.keep_cache = false;
  generate(*e, {1, 5, 6, 7}, p);
  EXPECT_EQ(e->cached_tokens(0), 0);
  EXPECT_EQ(e->cached_prefix(0, std::vector<int32_t>{1, 5, 6, 7}), 0);
  p.keep_cache = true;
  generate(*e, {1, 5, 6, 7}, p);
  EXPECT_EQ(e->cached_tokens(0), 7);  // 4 prompt + 3 fed-back answer tokens
}

// Tokens for copy tests: BOS, then a fixed pseudo-random walk.
std::vector<int32_t> walk(int n, int n_vocab, int mul, int add) {
  std::vector<int32_t> t = {1};
  for (int i = 0; i < n; ++i) t.push_back(static_cast<int32_t>((i * mul + add) % (n_vocab - 3) + 3));
  return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The pinned prefix is computed once; a request that starts with it copies
// its rows and computes only the rest, with the same greedy output.
void expect_pinned_matches_cold(const std::string& model) {
  auto cold = make_engine(model, 1, 256, 1, DType::F16, 16);
  ASSERT_TRUE(cold);
  const int n_vocab = cold->model().config.n_vocab;
  const std::vector<int32_t> sys = walk(40, n_vocab, 37, 11);
  auto e = make_engine(model, 2, 256, 1, DType::F16, 16, AttnMath::F32, 0, sys);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->pinned_tokens(), 41);
  EXPECT_EQ(e->plan().pinned, 41 * e->plan().kv_per_token);
  GenerateParams p = greedy(10);
  p.ignore_eos = true;
  p.copy_from = kPinnedPrefix;
  const std::vector<int32_t> prompt = concat(sys, {7, 8, 9, 10, 11});
  // Slot 1: nothing of its own cached.
  SlotRef r = e->try_acquire(1);
  ASSERT_TRUE(r.ok());
  const uint64_t before = e->stats().prompt_tokens;
  const std::vector<int32_t> out = generate(*e, prompt, p, nullptr, r);
  EXPECT_EQ(e->stats().prompt_tokens - before, 5u);
  EXPECT_EQ(e->reused_tokens(1), 41);
  GenerateParams plain = p;
  plain.copy_from = -1;
  EXPECT_EQ(out, generate(*cold, prompt, plain)) << model;
  // A prompt that leaves the pinned text early copies only what matches.
  std::vector<int32_t> diverging = sys;
  diverging.resize(20);
  diverging.push_back(5);
  diverging.push_back(6);
  r = e->try_acquire(1);
  ASSERT_TRUE(r.ok());
  const std::vector<int32_t> out2 = generate(*e, diverging, p, nullptr, r);
  EXPECT_EQ(e->reused_tokens(1), 20);
  EXPECT_EQ(out2, generate(*cold, diverging, plain)) << model;
  // Slot 0 computed the prefix at start and keeps it as its own cache.
  EXPECT_EQ(e->cached_prefix(0, prompt), 41);
}

TEST(EngineCopy, PinnedPrefixEqualsComputingItAll) {
  expect_pinned_matches_cold(synth_model("tiny-qwen2", "Q4_0"));
  expect_pinned_matches_cold(synth_model("tiny-llama", "Q8_0"));
}

TEST(EngineCopyShared, Stories260KPinnedPrefixEqualsComputingItAll) {
  EDGELM_REQUIRE_SHARED(model, "stories260K.gguf");
  expect_pinned_matches_cold(model);
}

// Another slot's rows are copied, whether it is still running or free.
TEST(EngineCopy, FromARunningOrFreeSlot) {
  const std::string model = synth_model("tiny-qwen2", "Q4_0");
  // Steps of at least 10 ms: slot 0's 200 tokens take 2 s or more, so it
  // is still decoding while slot 1 copies from it (unpadded, a fast CPU
  // finished all 200 before the state was read).
  auto e = make_engine(model, 3, 256, 1, DType::F16, 16, AttnMath::F32, 0.01);
  auto cold = make_engine(model, 1, 256, 1, DType::F16, 16);
  ASSERT_TRUE(e && cold);
  const int n_vocab = e->model().config.n_vocab;
  const std::vector<int32_t> shared = walk(30, n_vocab, 41, 7);
  // Slot 0 runs a long answer to `shared` + 3 tokens.
  GenerateParams longp = greedy(200);
  longp.ignore_eos = true;
  const SlotRef a = e->try_acquire(0);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(e->submit(a, concat(shared, {4, 5, 6}), longp).ok());
  // Once it decodes, its prompt's rows are computed.
  e->wait_for(0, 0, std::chrono::steady_clock::now() + std::chrono::seconds(30));
  ASSERT_EQ(e->state(0), Engine::SlotState::Decode);
  const std::vector<int32_t> prompt = concat(shared, {9, 10, 11, 12});
  EXPECT_EQ(e->prefix_in_slot(0, prompt), 31);
  GenerateParams p = greedy(8);
  p.ignore_eos = true;
  p.copy_from = 0;
  SlotRef b = e->try_acquire(1);
  ASSERT_TRUE(b.ok());
  const std::vector<int32_t> out = generate(*e, prompt, p, nullptr, b);
  EXPECT_EQ(e->reused_tokens(1), 31);
  GenerateParams plain = p;
  plain.copy_from = -1;
  const std::vector<int32_t> want = generate(*cold, prompt, plain);
  EXPECT_EQ(out, want);
  e->release(a);  // slot 0 is now free and keeps what it computed
  ASSERT_EQ(e->state(0), Engine::SlotState::Free);
  SlotRef c = e->try_acquire(2);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(generate(*e, prompt, p, nullptr, c), want);
  EXPECT_EQ(e->reused_tokens(2), 31);
  // Copying from itself is refused.
  c = e->try_acquire(2);
  GenerateParams self = p;
  self.copy_from = 2;
  EXPECT_FALSE(e->submit(c, prompt, self).ok());
  e->release(c);
}

// While a queued request waits to copy from a free slot, that slot cannot
// be taken (its tokens and rows must not change under the copy).
TEST(EngineCopy, ALendingSlotCannotBeAcquired) {
  const std::string model = synth_model("tiny-qwen2", "Q4_0");
  auto e = make_engine(model, 2, 128, 1, DType::F16, 16, AttnMath::F32, 0, {}, /*start=*/false);
  ASSERT_TRUE(e);
  GenerateParams p = greedy(2);
  p.ignore_eos = true;
  p.copy_from = 0;
  const SlotRef dst = e->try_acquire(1);
  ASSERT_TRUE(dst.ok());
  ASSERT_TRUE(e->submit(dst, std::vector<int32_t>{1, 5, 6, 7}, p).ok());
  EXPECT_TRUE(e->lending(0));
  EXPECT_FALSE(e->try_acquire(0).ok());
  EXPECT_FALSE(e->try_acquire().ok());  // slot 1 is taken, slot 0 is lent
  e->start();
  std::vector<int32_t> out;
  for (int n = 0; e->finish(1) == Finish::None;)
    n = e->wait_for(1, n, std::chrono::steady_clock::now() + std::chrono::seconds(30));
  EXPECT_FALSE(e->lending(0));
  const SlotRef again = e->try_acquire(0);
  EXPECT_TRUE(again.ok());
  e->release(again);
  e->release(dst);
}

}  // namespace
}  // namespace edgelm
