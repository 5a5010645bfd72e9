// KV cache helpers: store_kv formats, and dot_f32_kv / axpy_kv on every ISA
// against the scalar reference and against double arithmetic.

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernel_test_util.h"

namespace edgelm::kernels {
namespace {

const DType kKvTypes[] = {DType::F32, DType::F16, DType::Q8_0};

// Row lengths: Q8_0 rows are whole blocks; float rows may have any length.
std::vector<int64_t> lengths(DType t) {
  std::vector<int64_t> v = {32, 64, 96, 128, 160, 256, 4096};
  if (t != DType::Q8_0) v.insert(v.end(), {1, 7, 15, 17, 40, 100});
  return v;
}

TEST(Kv, StoreMatchesRowQuantizers) {
  std::mt19937 rng(1);
  for (DType t : kKvTypes) {
    for (int64_t n : {32, 64, 128, 96, 4096}) {
      auto x = test::random_floats(n, rng);
      std::vector<uint8_t> got(row_bytes(t, n)), want(row_bytes(t, n));
      store_kv(t, x.data(), got.data(), n);
      quantize_row(t, x.data(), want.data(), n);
      EXPECT_EQ(got, want) << dtype_name(t) << " n=" << n;
    }
  }
}

class KvIsa : public ::testing::TestWithParam<DType> {};

TEST_P(KvIsa, DotMatchesScalarAndDouble) {
  const DType t = GetParam();
  std::mt19937 rng(2);
  for (int64_t n : lengths(t)) {
    for (int rep = 0; rep < 8; ++rep) {
      auto q = test::random_floats(n, rng);
      auto kf = test::random_floats(n, rng);
      std::vector<uint8_t> k(row_bytes(t, n));
      store_kv(t, kf.data(), k.data(), n);
      const auto kd = test::dequantize(t, k.data(), n);
      double exact = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        exact += static_cast<double>(q[i]) * kd[i];
        mag += std::fabs(static_cast<double>(q[i]) * kd[i]);
      }
      const float want = dot_f32_kv(Isa::Scalar, t, q.data(), k.data(), n);
      EXPECT_NEAR(want, exact, 1e-5 * mag) << dtype_name(t) << " n=" << n;
      for (Isa isa : supported_isas()) {
        const float got = dot_f32_kv(isa, t, q.data(), k.data(), n);
        ASSERT_NEAR(got, want, 1e-5 * mag) << dtype_name(t) << " " << isa_name(isa) << " n=" << n;
      }
    }
  }
}

TEST_P(KvIsa, AxpyMatchesScalarAndDouble) {
  const DType t = GetParam();
  std::mt19937 rng(3);
  for (int64_t n : lengths(t)) {
    auto vf = test::random_floats(n, rng);
    auto y0 = test::random_floats(n, rng);
    std::vector<uint8_t> v(row_bytes(t, n));
    store_kv(t, vf.data(), v.data(), n);
    const auto vd = test::dequantize(t, v.data(), n);
    const float a = 0.37f;
    auto want = y0;
    axpy_kv(Isa::Scalar, t, a, v.data(), want.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double exact = y0[i] + static_cast<double>(a) * vd[i];
      EXPECT_NEAR(want[i], exact, 2e-7 * (std::fabs(y0[i]) + std::fabs(a * vd[i])) + 1e-30);
    }
    for (Isa isa : supported_isas()) {
      auto got = y0;
      axpy_kv(isa, t, a, v.data(), got.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        // One rounding of a*d (Q8_0) and one of the fused or unfused add.
        const double tol = 3e-7 * (std::fabs(y0[i]) + std::fabs(a * vd[i])) + 1e-30;
        ASSERT_NEAR(got[i], want[i], tol) << dtype_name(t) << " " << isa_name(isa) << " i=" << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, KvIsa, ::testing::ValuesIn(kKvTypes),
                         [](const auto& tp) { return std::string(dtype_name(tp.param)); });

}  // namespace
}  // namespace edgelm::kernels
