// stream_response takes over an admitted slot: whatever happens inside it,
// an allocation that fails included, the slot is given back.
#include "serve/stream.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <new>
#include <stdexcept>
#include <string_view>
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

// One slot behind a gate that sheds nothing, and the request in it.
class StreamResponse : public ::testing::Test {
 protected:
  void SetUp() override {
    e = test::make_engine(test::synth_model("tiny-llama", "Q8_0"), 1, 128, 1);
    ASSERT_TRUE(e);
    AdmissionOptions o;
    o.min_stream_rate = 0;
    o.max_slowdown = 0;
    o.max_ttft_slowdown = 0;
    adm = std::make_unique<Admission>(*e, o);
  }
  // Admits a request for `p.max_tokens` after `prompt` and submits it: its
  // slot, or a reference that is not ok().
  SlotRef start(const GenerateParams& p) {
    Ask ask;
    ask.prompt = prompt;
    ask.max_tokens = p.max_tokens;
    ask.reuse = false;
    SlotRef ref;
    if (!adm->admit(ask, ref).ok() || !e->submit(ref, prompt, p).ok()) return {};
    return ref;
  }
  // A streamed chat answer's spec.
  StreamSpec spec() const {
    StreamSpec sp;
    sp.id = "chatcmpl-test";
    sp.model = "tiny";
    sp.chat = true;
    sp.stream = true;
    sp.n_prompt = static_cast<int>(prompt.size());
    sp.t0 = sp.t_admitted = Clock::now();
    return sp;
  }
  StreamDeps deps() { return StreamDeps{*e, *adm, metrics, 500}; }

  const std::vector<int32_t> prompt = {1, 2, 3};
  std::unique_ptr<Engine> e;
  std::unique_ptr<Admission> adm;
  Metrics metrics;
};

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
TEST_F(StreamResponse, GivesTheSlotBackWhenAnAllocationFails) {
  int threw = 0;
  for (int n = 0; n < 1000; ++n) {
    const SlotRef ref = start(test::greedy(4));
    ASSERT_TRUE(ref.ok()) << "allocation " << n;
    StreamSpec sp = spec();
    sp.dropped = 1;  // one more header
    sp.stops = {"never-a-stop", "nor-this"};
    bool failed = false;
    {
      httplib::Response res;
      test::fail_allocation(n);
      try {
        stream_response(res, deps(), std::move(sp), ref);
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

// An exception inside the stream (here from the connection's writer)
// does not leave the provider, where it would end the process: the stream
// ends, the slot comes back, and the end is counted as a server error.
TEST_F(StreamResponse, AnExceptionInsideTheStreamEndsOnlyThatStream) {
  GenerateParams p = test::greedy(8);
  p.ignore_eos = true;
  const SlotRef ref = start(p);
  ASSERT_TRUE(ref.ok());
  {
    httplib::Response res;
    stream_response(res, deps(), spec(), ref);
    ASSERT_TRUE(res.content_provider_);
    int writes = 0;
    httplib::DataSink sink;
    sink.write = [&](const char*, size_t) -> bool {
      if (++writes == 2) throw std::runtime_error("the writer failed");
      return true;
    };
    sink.done = [] {};
    sink.is_writable = [] { return true; };
    bool more = true;
    EXPECT_NO_THROW(more = res.content_provider_(0, 0, sink));
    EXPECT_FALSE(more) << "the provider must end the stream";
    EXPECT_EQ(writes, 2);
    EXPECT_TRUE(freed(*e, ref.slot)) << "the provider gives the slot back when it breaks off";
  }
  static_assert(Metrics::kStatuses[7] == 500);
  static_assert(std::string_view(Metrics::kEnds[3]) == "error");
  EXPECT_EQ(metrics.by_status[7].load(), 1u) << "counted as 500";
  EXPECT_EQ(metrics.ends[3].load(), 1u) << "counted as ended by an error";
  EXPECT_EQ(metrics.client_disconnects.load(), 0u);
}

}  // namespace
}  // namespace edgelm::serve
