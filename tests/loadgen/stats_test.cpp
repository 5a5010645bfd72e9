#include "loadgen/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace edgelm::loadgen {
namespace {

TEST(Stats, PercentileInterpolatesBetweenRanks) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 0.0), 1);
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 1.0), 100);
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 0.5), 50.5);
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 0.9), 90.1);
  EXPECT_DOUBLE_EQ(percentile_sorted(v, 0.99), 99.01);
}

TEST(Stats, PercentileOfFewValues) {
  const std::vector<double> one = {7};
  EXPECT_DOUBLE_EQ(percentile_sorted(one, 0.99), 7);
  const std::vector<double> two = {10, 20};
  EXPECT_DOUBLE_EQ(percentile_sorted(two, 0.5), 15);
  EXPECT_DOUBLE_EQ(percentile_sorted(two, 0.99), 19.9);
  EXPECT_TRUE(std::isnan(percentile_sorted(std::vector<double>{}, 0.5)));
  EXPECT_DOUBLE_EQ(percentile_sorted(two, 2.0), 20);  // clamped
}

TEST(Stats, MedianOfOddAndEvenCounts) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_TRUE(std::isnan(median({})));
}

TEST(Stats, SummarySortsAndSkipsNaN) {
  const double nan = std::nan("");
  std::vector<double> v = {nan, 5, 1, 4, nan, 2, 3};
  const Summary s = summarize(v);
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 5);
  EXPECT_DOUBLE_EQ(s.mean, 3);
  EXPECT_DOUBLE_EQ(s.p50, 3);
  EXPECT_DOUBLE_EQ(s.p90, 4.6);
  EXPECT_NEAR(s.p99, 4.96, 1e-12);
}

TEST(Stats, EmptySummaryIsNaN) {
  const Summary s = summarize({std::nan("")});
  EXPECT_EQ(s.count, 0u);
  EXPECT_TRUE(std::isnan(s.p50));
  EXPECT_TRUE(std::isnan(s.max));
}

TEST(Stats, TailPercentileOfALargeSample) {
  // 990 fast values and 10 slow ones: rank 0.99 * 999 = 989.01 sits just
  // past the last fast value, so p99 is barely above it, and p99 of 980 fast
  // and 20 slow is slow.
  std::vector<double> v(990, 1.0);
  for (int i = 0; i < 10; ++i) v.push_back(100.0);
  Summary s = summarize(v);
  EXPECT_DOUBLE_EQ(s.p50, 1.0);
  EXPECT_NEAR(s.p99, 1.99, 1e-9);
  EXPECT_DOUBLE_EQ(s.max, 100.0);
  std::vector<double> w(980, 1.0);
  for (int i = 0; i < 20; ++i) w.push_back(100.0);
  s = summarize(w);
  EXPECT_DOUBLE_EQ(s.p99, 100.0);
}

}  // namespace
}  // namespace edgelm::loadgen
