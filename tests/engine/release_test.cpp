// Engine::release where it is hard: an engine that is stopped or was never
// started, a slot that was only reserved, and two releases of one holding at
// once. Whatever happens, the slot ends Free, its cache and constraint agree
// with what ran in it, and every slot stays usable.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <thread>

#include "engine/engine.h"
#include "engine/engine_test_util.h"

namespace edgelm {
namespace {

using test::generate;
using test::greedy;
using test::make_engine;
using test::synth_model;

// Allows every token and never ends: only its ownership matters here.
class AnyToken : public TokenConstraint {
 public:
  bool allows(int32_t, int) override { return true; }
  int mask(const float* logits, float* out, int n_vocab, int) override {
    for (int t = 0; t < n_vocab; ++t) out[t] = logits[t];
    return n_vocab;
  }
  void accept(int32_t) override {}
  bool done() const override { return false; }
};

GenerateParams copying_from(int src) {
  GenerateParams p = greedy(2);
  p.ignore_eos = true;
  p.copy_from = src;
  return p;
}

// A request queued to copy from slot 0 and released before the engine ever
// started: slot 0 must not stay lent (unacquirable) for ever.
TEST(EngineRelease, AQueuedCopyReleasedBeforeStartFreesItsSource) {
  auto e = make_engine(synth_model("tiny-qwen2", "Q4_0"), 2, 128, 1, DType::F16, 16, AttnMath::F32, 0, {},
                       /*start=*/false);
  ASSERT_TRUE(e);
  const SlotRef dst = e->try_acquire(1);
  ASSERT_TRUE(dst.ok());
  ASSERT_TRUE(e->submit(dst, std::vector<int32_t>{1, 5, 6, 7}, copying_from(0)).ok());
  ASSERT_TRUE(e->lending(0));
  e->release(dst);
  EXPECT_EQ(e->state(1), Engine::SlotState::Free);
  EXPECT_EQ(e->finish(1), Finish::Cancelled) << "a reader of the slot is told the request ended";
  EXPECT_FALSE(e->lending(0)) << "the released request still holds slot 0 as its copy source";
  const SlotRef src = e->try_acquire(0);
  EXPECT_TRUE(src.ok());
  e->release(src);
  e->start();
  EXPECT_EQ(generate(*e, {1, 4}, greedy(3)).size(), 3u);
  EXPECT_EQ(generate(*e, {1, 4}, greedy(3)).size(), 3u);
  EXPECT_EQ(e->active_slots(), 0);
}

// A failed step ends each request in it once. Between the end of a prompt's
// request and the loop's next token, that request's client may release the
// slot and the next request take it (the testing aid holds the engine
// there while this test does both): the new request must run to its own
// end, not be ended by the failed step's next token of the same slot.
TEST(EngineRelease, AFailedStepEndsOnlyTheRequestsThatWereInIt) {
  std::atomic<bool> fail_next{false};
  std::atomic<int> error_finishes{0};
  std::promise<void> reached, reused;
  std::shared_future<void> reused_done = reused.get_future().share();
  auto e = make_engine(synth_model("tiny-qwen2", "Q4_0"), 1, 128, 1, DType::F16, 64, AttnMath::F32,
                       0, {}, true, [&](EngineOptions& o) {
                         o.fail_step = [&] { return fail_next.exchange(false); };
                         o.after_error_finish = [&](int) {
                           if (error_finishes.fetch_add(1) != 0) return;
                           reached.set_value();
                           // A bounded wait: a broken test must not hang the engine.
                           reused_done.wait_for(std::chrono::seconds(10));
                         };
                       });
  ASSERT_TRUE(e);
  // A prompt of eight tokens: one prefill chunk, eight tokens of slot 0 in
  // the step that fails.
  const std::vector<int32_t> prompt = {1, 5, 6, 7, 8, 9, 10, 11};
  const SlotRef first = e->try_acquire(0);
  ASSERT_TRUE(first.ok());
  fail_next = true;
  ASSERT_TRUE(e->submit(first, prompt, greedy(3)).ok());
  ASSERT_EQ(reached.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(e->finish(0), Finish::Error);
  // The engine is still in the failed step's loop: its client lets the slot
  // go and the next request takes it.
  e->release(first);
  const SlotRef second = e->try_acquire(0);
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(e->submit(second, prompt, greedy(3)).ok());
  reused.set_value();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int n = 0; e->finish(0) == Finish::None && std::chrono::steady_clock::now() < deadline;)
    n = e->wait_for(0, n, std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
  EXPECT_EQ(e->finish(0), Finish::Length)
      << "the failed step ended the request that took its slot after it";
  EXPECT_EQ(e->wait_for(0, 0, std::chrono::steady_clock::now()), 3);
  EXPECT_EQ(error_finishes.load(), 1);
  e->release(second);
}

// After stop(): a request that was running ends Cancelled and its slot Free
// with the KV it computed; one submitted after the stop (the engine thread
// is gone) is ended by release itself, its copy source given back.
TEST(EngineRelease, AfterStopEverySlotEndsFreeAndUsable) {
  auto e = make_engine(synth_model("tiny-qwen2", "Q4_0"), 3, 128, 1, DType::F16, 16, AttnMath::F32, 0.002);
  ASSERT_TRUE(e);
  GenerateParams p = greedy(100);
  p.ignore_eos = true;
  const SlotRef running = e->try_acquire(0);
  ASSERT_TRUE(e->submit(running, std::vector<int32_t>{1, 5, 6, 7}, p).ok());
  ASSERT_GE(e->wait_for(0, 1, std::chrono::steady_clock::now() + std::chrono::seconds(10)), 2);
  e->stop();
  EXPECT_EQ(e->finish(0), Finish::Cancelled);
  e->release(running);
  EXPECT_EQ(e->state(0), Engine::SlotState::Free);
  const int n_out = e->wait_for(0, 1 << 30, std::chrono::steady_clock::now());
  // The last sampled token has no KV yet: prompt + output - 1 positions.
  EXPECT_EQ(e->cached_tokens(0), 4 + n_out - 1);

  const SlotRef late = e->try_acquire(2);
  ASSERT_TRUE(late.ok());
  ASSERT_TRUE(e->submit(late, std::vector<int32_t>{1, 5, 6, 7, 8}, copying_from(0)).ok());
  ASSERT_TRUE(e->lending(0));
  e->release(late);  // must not wait for an engine that will never step again
  EXPECT_EQ(e->state(2), Engine::SlotState::Free);
  EXPECT_FALSE(e->lending(0));
  EXPECT_EQ(e->cached_tokens(2), 0) << "nothing was computed in slot 2";
  for (int i = 0; i < e->n_slots(); ++i) {
    const SlotRef r = e->try_acquire(i);
    EXPECT_TRUE(r.ok()) << "slot " << i << " is unusable after stop";
    e->release(r);
  }
  e->start();
  EXPECT_EQ(generate(*e, {1, 4}, greedy(3)).size(), 3u);
}

// A slot reserved and given back without a request keeps the cache it had:
// here the pinned prefix, which slot 0 holds from the start.
TEST(EngineRelease, AReservedSlotKeepsItsCache) {
  const std::vector<int32_t> pinned = {1, 9, 8, 7, 6, 5};
  auto e = make_engine(synth_model("tiny-qwen2", "Q4_0"), 2, 128, 1, DType::F16, 16, AttnMath::F32, 0, pinned,
                       /*start=*/false);
  ASSERT_TRUE(e);
  ASSERT_EQ(e->cached_tokens(0), 6);
  for (bool started : {false, true}) {
    if (started) e->start();
    const SlotRef r = e->try_acquire(0);
    ASSERT_TRUE(r.ok());
    e->release(r);
    EXPECT_EQ(e->cached_tokens(0), 6) << (started ? "running" : "never started") << " engine";
    EXPECT_EQ(e->cached_prefix(0, pinned), 6);
  }
}

// Two releases of one holding at once (an HTTP thread and a releaser, say):
// one frees the slot; the other must not touch it afterwards, when it may
// already hold the next request (whose constraint and cache are its own).
TEST(EngineRelease, TwiceAtOnceLeavesTheNextRequestAlone) {
  auto e = make_engine(synth_model("tiny-qwen2", "Q4_0"), 1, 128, 1, DType::F16, 16);
  ASSERT_TRUE(e);
  GenerateParams p = greedy(1000);
  p.ignore_eos = true;
  for (int round = 0; round < 200; ++round) {
    const SlotRef ref = e->try_acquire(0);
    ASSERT_TRUE(ref.ok());
    p.constraint = std::make_shared<AnyToken>();
    ASSERT_TRUE(e->submit(ref, std::vector<int32_t>{1, 5, 6, 7}, p).ok());
    e->wait_for(0, 0, std::chrono::steady_clock::now() + std::chrono::seconds(10));
    // The next request: taken the moment the slot is free.
    auto next = std::make_shared<AnyToken>();
    GenerateParams q = greedy(1000);
    q.ignore_eos = true;
    q.keep_cache = true;
    q.constraint = next;
    SlotRef taken;
    std::atomic<int> go{0};
    std::thread taker([&] {
      ++go;
      while (!(taken = e->try_acquire(0)).ok()) std::this_thread::yield();
      ASSERT_TRUE(e->submit(taken, std::vector<int32_t>{1, 2}, q).ok());
      q.constraint.reset();  // the slot's copy is the only one besides `next`
    });
    std::thread a([&] {
      ++go;
      while (go.load() < 3) {}
      e->release(ref);
    });
    ++go;
    while (go.load() < 3) {}
    e->release(ref);
    a.join();
    taker.join();
    ASSERT_TRUE(taken.ok());
    EXPECT_EQ(taken.gen, ref.gen + 2) << "round " << round << ": the slot was freed more than once";
    EXPECT_EQ(next.use_count(), 2) << "round " << round << ": a late release dropped the next request's constraint";
    EXPECT_NE(e->state(0), Engine::SlotState::Free);
    EXPECT_EQ(e->cached_tokens(0), 0) << "round " << round << ": a late release wrote the next request's cache";
    e->release(taken);
    ASSERT_EQ(e->state(0), Engine::SlotState::Free);
    ASSERT_EQ(next.use_count(), 1);
    if (HasFailure()) break;
  }
}

}  // namespace
}  // namespace edgelm
