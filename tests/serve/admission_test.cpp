// The gate's arithmetic: per-stream rates from the step model, the floor
// every admitted stream is promised, and Retry-After.
#include "serve/admission.h"

#include <gtest/gtest.h>

#include <limits>

namespace edgelm::serve {
namespace {

StepModel model(double a, double b) {
  StepModel m;
  m.a = a;
  m.b = b;
  return m;
}

TEST(Admission, PredictedRatePerStream) {
  const StepModel m = model(0.040, 0.010);  // a lone stream: 50 ms per token
  EXPECT_DOUBLE_EQ(predicted_stream_rate(m, 1), 20.0);
  EXPECT_DOUBLE_EQ(predicted_stream_rate(m, 4), 12.5);
  EXPECT_DOUBLE_EQ(predicted_stream_rate(m, 0), 20.0);  // counted as one
}

TEST(Admission, FloorIsTheLargerOfAbsoluteAndRelative) {
  const StepModel m = model(0.040, 0.010);
  AdmissionOptions o;
  o.min_stream_rate = 5;
  o.max_slowdown = 2;
  EXPECT_DOUBLE_EQ(stream_rate_floor(o, m), 10.0);  // 20 / 2
  o.min_stream_rate = 15;
  EXPECT_DOUBLE_EQ(stream_rate_floor(o, m), 15.0);
  o.min_stream_rate = 0;
  o.max_slowdown = 0;
  EXPECT_DOUBLE_EQ(stream_rate_floor(o, m), 0.0);  // both off
  o.max_slowdown = 4;
  EXPECT_DOUBLE_EQ(stream_rate_floor(o, m), 5.0);
  // No step model yet (nothing measured): only the absolute floor.
  o.min_stream_rate = 3;
  EXPECT_DOUBLE_EQ(stream_rate_floor(o, StepModel{}), 3.0);
}

// With a = 40 ms, b = 10 ms and a slowdown of 2, a step may take 100 ms:
// six streams (100 ms) keep the promise, a seventh (110 ms) would not.
TEST(Admission, SlowdownBoundsTheStreamCount) {
  const StepModel m = model(0.040, 0.010);
  AdmissionOptions o;
  o.min_stream_rate = 0;
  o.max_slowdown = 2;
  const double floor = stream_rate_floor(o, m);
  EXPECT_GE(predicted_stream_rate(m, 6), floor - 1e-9);
  EXPECT_LT(predicted_stream_rate(m, 7), floor);
}

// The unloaded yardstick keeps the lowest idle fit of its window: a fit
// that creeps up under load does not loosen the promise, a lower one is
// taken at once, and past the window the fit of the moment is taken.
TEST(Admission, TheUnloadedYardstickIsTheLowestFitOfItsWindow) {
  Yardstick y(300, 64);
  StepModel fast = model(0.025, 0.0028), slower = model(0.027, 0.0030), faster = model(0.024, 0.0027);
  EXPECT_DOUBLE_EQ(y.update(fast, 0).a, 0.025);
  EXPECT_DOUBLE_EQ(y.update(slower, 10).a, 0.025) << "the load's creep is not taken";
  EXPECT_DOUBLE_EQ(y.update(faster, 20).a, 0.024) << "a lower fit is";
  EXPECT_DOUBLE_EQ(y.update(slower, 319).a, 0.024) << "within 300 s of the lowest";
  EXPECT_DOUBLE_EQ(y.update(slower, 321).a, 0.027) << "a board that stays slower moves it";
  EXPECT_DOUBLE_EQ(y.current().a, 0.027);
}

// The first-token margin is the largest recent measured / predicted
// ratio, between its floor and its cap, and forgets after a window.
TEST(Admission, TheTtftMarginFollowsMeasuredOverPredicted) {
  TtftSpread m(1.15, 2.0);
  EXPECT_DOUBLE_EQ(m.margin(), 1.15) << "nothing measured: the floor";
  m.observe(1.0, 0.8);
  EXPECT_DOUBLE_EQ(m.margin(), 1.15) << "a fast first token never lowers it below the floor";
  m.observe(0.5, 0.7);
  EXPECT_DOUBLE_EQ(m.margin(), 1.4);
  m.observe(1.0, 1.2);
  EXPECT_DOUBLE_EQ(m.margin(), 1.4) << "the largest ratio, not the latest";
  m.observe(0.2, 1.0);
  EXPECT_DOUBLE_EQ(m.margin(), 2.0) << "at most the cap";
  m.observe(0.01, 1.0);  // under kMinPredicted: a step's length, not a misprediction
  m.observe(-1.0, 1.0);
  m.observe(1.0, std::numeric_limits<double>::infinity());
  for (int i = 0; i < TtftSpread::kWindow - 1; ++i) m.observe(1.0, 1.0);
  EXPECT_DOUBLE_EQ(m.margin(), 2.0) << "the 5x ratio is still among the last kWindow";
  m.observe(1.0, 1.0);
  EXPECT_DOUBLE_EQ(m.margin(), 1.15) << "forgotten once kWindow newer ones came";
  TtftSpread fixed(1.15, 1.0);  // a cap under the floor: a fixed margin
  fixed.observe(1.0, 3.0);
  EXPECT_DOUBLE_EQ(fixed.margin(), 1.15);
}

// The engine's step cap comes from the same options as the gate's floor.
TEST(Admission, EngineKeepsTheGatesPromise) {
  AdmissionOptions o;
  o.min_stream_rate = 5;
  o.max_slowdown = 3;
  EngineOptions eo;
  keep_promise(o, eo);
  EXPECT_DOUBLE_EQ(eo.max_step_seconds, 0.2);  // 1 / 5 tokens/s
  EXPECT_DOUBLE_EQ(eo.max_slowdown, 3.0);
  o.min_stream_rate = 0;  // absolute gate off: a step still stays under 0.5 s
  o.max_slowdown = 0;
  keep_promise(o, eo);
  EXPECT_DOUBLE_EQ(eo.max_step_seconds, 0.5);
  EXPECT_DOUBLE_EQ(eo.max_slowdown, 0.0);
}

TEST(Admission, RetryAfterFromTheSoonestFinishingStream) {
  EXPECT_EQ(retry_after_seconds(30, 10.0), 3);
  EXPECT_EQ(retry_after_seconds(31, 10.0), 4);  // rounded up
  EXPECT_EQ(retry_after_seconds(0, 10.0), 1);   // at least 1
  EXPECT_EQ(retry_after_seconds(10, 0.0), 1);   // no rate measured yet
  EXPECT_EQ(retry_after_seconds(1 << 30, 1.0), 3600);
}

}  // namespace
}  // namespace edgelm::serve
