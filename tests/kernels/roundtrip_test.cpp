// quantize_row -> dequantize_row on normal data: error bounds per type.

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernel_test_util.h"

namespace edgelm::kernels {
namespace {

using test::random_floats;

struct Bound {
  DType type;
  double max_rel_rms;  // RMS error / RMS of the data, measured bound with margin
};

// Measured on N(0, 1) rows, then about 15% added. A regression in a
// quantizer's scale choice shows up as a jump well past them.
const Bound kBounds[] = {
    {DType::F32, 0.0},     {DType::F16, 2.4e-4},   {DType::BF16, 1.9e-3}, {DType::Q8_0, 6.2e-3},
    {DType::Q8_1, 6.2e-3}, {DType::Q8_K, 8.2e-3},  {DType::Q6_K, 2.0e-2}, {DType::Q5_0, 4.9e-2},
    {DType::Q5_1, 4.4e-2}, {DType::Q5_K, 4.2e-2},  {DType::Q4_0, 1.0e-1}, {DType::Q4_1, 9.0e-2},
    {DType::Q4_K, 8.3e-2}, {DType::Q3_K, 1.65e-1}, {DType::Q2_K, 3.1e-1},
};

class RoundTrip : public ::testing::TestWithParam<Bound> {};

TEST_P(RoundTrip, ErrorWithinBound) {
  const Bound b = GetParam();
  std::mt19937 rng(7);
  const int64_t n = 4096;
  double err2 = 0, sig2 = 0;
  for (int row = 0; row < 16; ++row) {
    auto x = random_floats(n, rng);
    std::vector<uint8_t> q(row_bytes(b.type, n));
    quantize_row(b.type, x.data(), q.data(), n);
    auto y = test::dequantize(b.type, q.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(y[i]));
      err2 += (y[i] - x[i]) * static_cast<double>(y[i] - x[i]);
      sig2 += x[i] * static_cast<double>(x[i]);
    }
  }
  const double rel = std::sqrt(err2 / sig2);
  EXPECT_LE(rel, b.max_rel_rms) << dtype_name(b.type);
  RecordProperty("rel_rms", std::to_string(rel));
}

INSTANTIATE_TEST_SUITE_P(Types, RoundTrip, ::testing::ValuesIn(kBounds),
                         [](const auto& tp) { return std::string(dtype_name(tp.param.type)); });

// Blocks of zeros, of a constant, and with one outlier stay finite and exact
// where the format can be exact.
TEST(RoundTripEdge, ZerosConstantsAndOutliers) {
  for (DType t : test::weight_types()) {
    const int64_t n = 256;
    std::vector<uint8_t> q(row_bytes(t, n));
    std::vector<float> zero(n, 0.0f);
    quantize_row(t, zero.data(), q.data(), n);
    for (float v : test::dequantize(t, q.data(), n)) EXPECT_EQ(v, 0.0f) << dtype_name(t);

    std::vector<float> outlier(n, 0.01f);
    outlier[100] = -50.0f;
    quantize_row(t, outlier.data(), q.data(), n);
    auto y = test::dequantize(t, q.data(), n);
    for (float v : y) EXPECT_TRUE(std::isfinite(v)) << dtype_name(t);
    EXPECT_NEAR(y[100], -50.0f, 50.0f * 0.07f) << dtype_name(t);
  }
}

// Every legacy quant lies within one scale step of its input (clamping at
// the top of the range included).
TEST(RoundTripEdge, LegacyFormatsWithinOneStep) {
  std::mt19937 rng(9);
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0}) {
    auto x = random_floats(1024, rng);
    std::vector<uint8_t> q(row_bytes(t, 1024));
    quantize_row(t, x.data(), q.data(), 1024);
    auto y = test::dequantize(t, q.data(), 1024);
    const size_t bs = dtype_info(t).type_size;
    for (int b = 0; b < 32; ++b) {
      uint16_t dh;
      std::memcpy(&dh, q.data() + b * bs, 2);
      const float d = std::fabs(fp16_to_fp32(dh));
      for (int j = 0; j < 32; ++j) {
        // One step, plus the f16 rounding of d (and m) over up to 31 steps.
        EXPECT_LE(std::fabs(y[32 * b + j] - x[32 * b + j]), d * 1.02f + 2e-3f)
            << dtype_name(t) << " block " << b << " elem " << j;
      }
    }
  }
}

}  // namespace
}  // namespace edgelm::kernels
