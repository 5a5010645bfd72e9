// stream_response takes over an admitted slot: whatever happens inside it,
// an allocation that fails included, the slot is given back.
#include "serve/stream.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <new>
#include <thread>

#include "alloc_counter.h"
#include "engine/engine_test_util.h"

namespace edgelm::serve {
namespace {

using Clock = std::chrono::steady_clock;

// True once `slot` is free again (a cancelled request leaves it when the
// engine has seen the cancel), within five seconds.
bool freed(const Engine& e, int slot) {
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (e.state(slot) != Engine::SlotState::Free) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Every allocation of stream_response in turn fails (the n-th of the test
// thread's, n = 0, 1, ... until the call goes through): the session's own,
// the state it copies, the headers, the provider and releaser handed to the
// response. Each time the slot must come back, whether the exception left
// the call or the response was dropped unsent.
//
// Streamed only: a non-streamed answer also runs inside the call, and its
// JSON is built with nlohmann::json, whose values allocate while they are
// destroyed (3.11's destroy() keeps a stack of children), so a failure
// injected there ends the process by the library's design, not ours. The
// exceptions such a run can throw leave through the same session destructor
// as the ones here.
TEST(StreamResponse, GivesTheSlotBackWhenAnAllocationFails) {
  auto e = test::make_engine(test::synth_model("tiny-llama", "Q8_0"), 1, 128, 1);
  ASSERT_TRUE(e);
  AdmissionOptions o;
  o.min_stream_rate = 0;
  o.max_slowdown = 0;
  o.max_ttft_slowdown = 0;
  Admission adm(*e, o);
  Metrics metrics;
  const std::vector<int32_t> prompt = {1, 2, 3};
  int threw = 0;
  for (int n = 0; n < 1000; ++n) {
    Ask ask;
    ask.prompt = prompt;
    ask.max_tokens = 4;
    ask.reuse = false;
    SlotRef ref;
    const Decision d = adm.admit(ask, ref);
    ASSERT_TRUE(d.ok()) << "allocation " << n << ": " << reason_name(d.reason);
    ASSERT_TRUE(e->submit(ref, prompt, test::greedy(4)).ok());
    StreamSpec sp;
    sp.id = "chatcmpl-test";
    sp.model = "tiny";
    sp.chat = true;
    sp.stream = true;
    sp.n_prompt = static_cast<int>(prompt.size());
    sp.dropped = 1;  // one more header
    sp.stops = {"never-a-stop", "nor-this"};
    sp.t0 = sp.t_admitted = Clock::now();
    bool failed = false;
    {
      httplib::Response res;
      test::fail_allocation(n);
      try {
        stream_response(res, StreamDeps{*e, adm, metrics, 500}, std::move(sp), ref);
      } catch (const std::bad_alloc&) {
        failed = true;
      }
      test::fail_allocation(-1);
    }  // the response is dropped unsent
    ASSERT_TRUE(freed(*e, ref.slot))
        << "slot still held after allocation " << n << (failed ? " failed" : " went through");
    if (!failed) break;
    ++threw;
  }
  // The sweep failed the session's allocation and more, and reached a call
  // that went through.
  EXPECT_GE(threw, 3);
  EXPECT_LT(threw, 1000);
}

}  // namespace
}  // namespace edgelm::serve
