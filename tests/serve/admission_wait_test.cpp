// The wait queue is event-driven: a waiter is handed a slot the moment one
// becomes available, not at its next poll.
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <new>
#include <thread>

#include "engine/engine_test_util.h"
#include "serve/admission.h"

namespace edgelm::serve {
namespace {

using Clock = std::chrono::steady_clock;

// A queue of `queue` waiters that waits up to 10 s, and no throughput or
// first-token refusals: only slots decide.
AdmissionOptions slots_only(int queue) {
  AdmissionOptions o;
  o.queue = queue;
  o.queue_timeout_s = 10;
  o.min_stream_rate = 0;
  o.max_slowdown = 0;
  o.max_ttft_slowdown = 0;
  return o;
}

// A free slot that lends its KV rows to a queued copy cannot be taken; it
// becomes available when the engine has made the copy (readers drop to 0),
// with no release to hand it on. The waiter must get it then, by that event:
// without a `gone` callback its only timed wake-up is the safety net, a
// second after it queued, so a hand-off well inside that second (a few
// milliseconds in a plain build, ~9 under ThreadSanitizer) came from the
// event. A lost wake-up shows as a second.
TEST(AdmissionWait, AWaiterGetsASlotTheMomentItStopsLending) {
  auto e = test::make_engine(test::synth_model("tiny-llama", "Q8_0"), 2, 128, 1, DType::F16, 16, AttnMath::F32, 0, {},
                             /*start=*/false);
  ASSERT_TRUE(e);
  Admission adm(*e, slots_only(2));
  const std::vector<int32_t> prompt = {1, 2, 3};
  std::vector<double> ms;
  for (int trial = 0; trial < 5; ++trial) {
    // Slot 1 runs a request queued to copy from slot 0, which is free but lent.
    GenerateParams p = test::greedy(1);
    p.copy_from = 0;
    const SlotRef dst = e->try_acquire(1);
    ASSERT_TRUE(dst.ok());
    ASSERT_TRUE(e->submit(dst, prompt, p).ok());
    ASSERT_TRUE(e->lending(0));
    auto waiter = std::async(std::launch::async, [&] {
      Ask ask;
      ask.prompt = prompt;
      ask.max_tokens = 4;
      ask.reuse = false;
      SlotRef out;
      const Decision d = adm.admit(ask, out);
      return std::make_pair(d, out);
    });
    while (adm.queued() == 0) std::this_thread::yield();
    const auto t0 = Clock::now();
    e->start();  // its first step starts the copy and lets slot 0 go
    ASSERT_EQ(waiter.wait_for(std::chrono::seconds(5)), std::future_status::ready);
    const auto [d, out] = waiter.get();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    ASSERT_TRUE(d.ok()) << reason_name(d.reason);
    EXPECT_TRUE(d.waited);
    EXPECT_EQ(out.slot, 0);
    adm.release(out);
    adm.release(dst);
    e->stop();
  }
  std::sort(ms.begin(), ms.end());
  EXPECT_LT(ms[ms.size() / 2], 500.0) << "median ms from the end of lending to the hand-off (fastest " << ms.front()
                                     << ", slowest " << ms.back() << ")";
}

// A waiter whose `gone` throws (it allocates) leaves by the exception: out of
// the queue, with any slot handed to it while `gone` ran given back. Before,
// the queue kept a pointer to the dead waiter; the next release handed it
// the slot (a write into a destroyed frame) and the slot stayed reserved
// for no one.
TEST(AdmissionWait, AWaiterLeftByAnExceptionLeavesTheQueueAndNoSlotBehind) {
  auto e = test::make_engine(test::synth_model("tiny-llama", "Q8_0"), 1, 128, 1, DType::F16, 16,
                             AttnMath::F32, 0, {},
                             /*start=*/false);
  ASSERT_TRUE(e);
  Admission adm(*e, slots_only(2));
  const std::vector<int32_t> prompt = {1, 2, 3};
  Ask ask;
  ask.prompt = prompt;
  ask.max_tokens = 4;
  ask.reuse = false;
  // hand_over: the slot's holder lets it go while the waiter asks `gone`,
  // so the slot is the waiter's when the exception leaves.
  for (const bool hand_over : {false, true}) {
    SCOPED_TRACE(hand_over ? "granted while gone ran" : "still queued");
    SlotRef held = e->try_acquire(0);
    ASSERT_TRUE(held.ok());
    SlotRef out;
    auto gone = [&]() -> bool {
      if (hand_over) adm.release(held);
      throw std::bad_alloc();
    };
    EXPECT_THROW(adm.admit(ask, out, gone), std::bad_alloc);
    EXPECT_FALSE(out.ok());
    EXPECT_EQ(adm.queued(), 0);
    if (!hand_over) adm.release(held);
    // The one slot is free again: a newcomer gets it at once.
    SlotRef next;
    const Decision d = adm.admit(ask, next);
    ASSERT_TRUE(d.ok()) << reason_name(d.reason);
    EXPECT_FALSE(d.waited);
    EXPECT_EQ(next.slot, 0);
    adm.release(next);
  }
}

// With preemption, an urgent newcomer behind an urgent waiter looks for a
// stream to end. Under memory pressure (or while draining) the hand-off
// would refuse it anyway, so it is refused at once and ends nothing.
TEST(AdmissionWait, ARequestRefusedForMemoryPressureEndsNoStream) {
  auto e = test::make_engine(test::synth_model("tiny-llama", "Q8_0"), 2, 128, 1, DType::F16, 16,
                             AttnMath::F32, 0, {},
                             /*start=*/false);
  ASSERT_TRUE(e);
  AdmissionOptions o = slots_only(4);
  o.classes = {{"sensor", 0}, {"chat", 0}};
  o.default_class = 1;
  o.preempt = true;
  Admission adm(*e, o);
  const std::vector<int32_t> prompt = {1, 2, 3};
  auto make_ask = [&](int cls) {
    Ask a;
    a.prompt = prompt;
    a.max_tokens = 4;
    a.reuse = false;
    a.cls = cls;
    return a;
  };
  // Two chat streams (the engine is not started: they stay queued, which
  // preemption may end as well).
  SlotRef chat[2];
  for (SlotRef& c : chat) {
    ASSERT_TRUE(adm.admit(make_ask(1), c).ok());
    ASSERT_TRUE(e->submit(c, prompt, test::greedy(4)).ok());
  }
  // A sensor request ends the younger one and waits for its slot.
  SlotRef first_out;
  auto first = std::async(std::launch::async, [&] { return adm.admit(make_ask(0), first_out); });
  while (adm.queued() == 0) std::this_thread::yield();
  int pending = 0;
  for (int i = 0; i < 2; ++i) pending += e->preempt_pending(i);
  ASSERT_EQ(pending, 1);
  adm.set_memory_pressure(true);
  SlotRef out;
  const Decision d = adm.admit(make_ask(0), out);
  EXPECT_FALSE(d.ok());
  EXPECT_EQ(d.reason, Reason::MemoryPressure);
  EXPECT_FALSE(out.ok());
  pending = 0;
  for (int i = 0; i < 2; ++i) pending += e->preempt_pending(i);
  EXPECT_EQ(pending, 1) << "the refused request ended a stream";
  EXPECT_EQ(adm.queued(), 1);
  adm.set_memory_pressure(false);
  for (const SlotRef& c : chat) adm.release(c);
  ASSERT_EQ(first.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_TRUE(first.get().ok());
  adm.release(first_out);
}

}  // namespace
}  // namespace edgelm::serve
