// The element-wise kernels (SiLU x up, RMSNorm) on every ISA against the
// scalar reference, and the reference against the formula in double.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernel_test_util.h"

namespace edgelm::kernels {
namespace {

double silu_mul_exact(float g, float u) {
  return static_cast<double>(g) / (1.0 + std::exp(-static_cast<double>(g))) * u;
}

TEST(Elementwise, SiluMulMatchesTheFormulaOnEveryIsa) {
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  // Lengths around the vector widths and the unrolled pair of vectors.
  for (int64_t n : {1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 8960}) {
    std::vector<float> g0(static_cast<size_t>(n)), u(static_cast<size_t>(n));
    for (auto& v : g0) v = nd(rng);
    for (auto& v : u) v = nd(rng);
    // Both tails of the sigmoid, where exp(-g) overflows or vanishes.
    if (n > 4) g0[0] = -120.0f, g0[1] = 120.0f, g0[2] = 0.0f, g0[3] = -88.5f;
    for (Isa isa : supported_isas()) {
      auto g = g0;
      silu_mul(isa, g.data(), u.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double want = silu_mul_exact(g0[i], u[i]);
        // A few ulp of the result, or of the smallest normal float: below it
        // the SIMD exp flushes to zero.
        const double tol = 4e-7 * std::abs(want) + 1.2e-38 * std::abs(g0[i] * u[i]);
        ASSERT_NEAR(g[i], want, tol) << isa_name(isa) << " n=" << n << " g=" << g0[i] << " u=" << u[i];
        ASSERT_TRUE(std::isfinite(g[i])) << isa_name(isa) << " g=" << g0[i];
      }
    }
  }
}

TEST(Elementwise, RmsNormMatchesTheFormulaOnEveryIsa) {
  std::mt19937 rng(22);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int64_t n : {1, 5, 8, 16, 31, 32, 33, 64, 128, 1536, 1537}) {
    std::vector<float> x(static_cast<size_t>(n)), w(static_cast<size_t>(n));
    for (auto& v : x) v = nd(rng);
    for (auto& v : w) v = 1.0f + nd(rng) / 8;
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const float eps = 1e-6f;
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (Isa isa : supported_isas()) {
      for (bool gain : {true, false}) {
        std::vector<float> y(static_cast<size_t>(n), -7.0f);
        rms_norm(isa, x.data(), gain ? w.data() : nullptr, y.data(), n, eps);
        for (int64_t i = 0; i < n; ++i) {
          const double want = x[i] * scale * (gain ? w[i] : 1.0f);
          ASSERT_NEAR(y[i], want, 1e-6 * std::abs(want) + 1e-30) << isa_name(isa) << " n=" << n << " i=" << i;
        }
        // In place gives the same values.
        auto z = x;
        rms_norm(isa, z.data(), gain ? w.data() : nullptr, z.data(), n, eps);
        EXPECT_EQ(z, y) << isa_name(isa) << " n=" << n;
      }
    }
  }
  // A row of zeros is scaled by 1/sqrt(eps): zeros, not NaN.
  std::vector<float> zero(64, 0.0f), y(64, 1.0f);
  for (Isa isa : supported_isas()) {
    rms_norm(isa, zero.data(), nullptr, y.data(), 64, 1e-5f);
    for (float v : y) ASSERT_EQ(v, 0.0f) << isa_name(isa);
  }
}

// RoPE: a hand-checked quarter turn, then every ISA against the formula in
// double, NeoX and the original pairing, full and partial rotation, lengths
// around the vector widths.
TEST(Elementwise, RopeRotatesEachPairByItsAngle) {
  // Two pairs, angles 90 and 180 degrees: (1, 2) -> (-2, 1), (3, 4) -> (-3, -4).
  for (bool neox : {false, true}) {
    float table[4];
    rope_table_entry(table, 4, neox, 0, 0.0f, 1.0f);
    rope_table_entry(table, 4, neox, 1, -1.0f, 0.0f);
    // Pair 0 is dims (0, 1) in the original layout, (0, 2) in NeoX's.
    const std::vector<float> in = neox ? std::vector<float>{1, 3, 2, 4, 9} : std::vector<float>{1, 2, 3, 4, 9};
    const std::vector<float> want = neox ? std::vector<float>{-2, -3, 1, -4, 9} : std::vector<float>{-2, 1, -3, -4, 9};
    for (Isa isa : supported_isas()) {
      auto x = in;
      rope(isa, x.data(), 1, 5, table, 4, neox);
      EXPECT_EQ(x, want) << isa_name(isa) << (neox ? " neox" : " original");
    }
  }
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::uniform_real_distribution<float> angle(-3.2f, 3.2f);
  struct Shape {
    int heads, head_dim, rope_dim;
  };
  for (const Shape sh : {Shape{1, 2, 2}, Shape{2, 6, 6}, Shape{3, 16, 16}, Shape{2, 24, 20}, Shape{12, 64, 64},
                         Shape{2, 128, 128}, Shape{3, 128, 64}, Shape{1, 40, 36}}) {
    for (bool neox : {false, true}) {
      const int half = sh.rope_dim / 2;
      std::vector<float> table(static_cast<size_t>(sh.rope_dim));
      std::vector<double> c(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
      for (int i = 0; i < half; ++i) {
        const float a = angle(rng);
        c[static_cast<size_t>(i)] = std::cos(a);
        sn[static_cast<size_t>(i)] = std::sin(a);
        rope_table_entry(table.data(), sh.rope_dim, neox, i, static_cast<float>(c[static_cast<size_t>(i)]),
                         static_cast<float>(sn[static_cast<size_t>(i)]));
      }
      std::vector<float> x0(static_cast<size_t>(sh.heads * sh.head_dim));
      for (auto& v : x0) v = nd(rng);
      for (Isa isa : supported_isas()) {
        auto x = x0;
        rope(isa, x.data(), sh.heads, sh.head_dim, table.data(), sh.rope_dim, neox);
        for (int h = 0; h < sh.heads; ++h) {
          const float* in = x0.data() + static_cast<size_t>(h) * sh.head_dim;
          const float* out = x.data() + static_cast<size_t>(h) * sh.head_dim;
          for (int i = 0; i < half; ++i) {
            const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            const double ci = static_cast<float>(c[static_cast<size_t>(i)]);
            const double si = static_cast<float>(sn[static_cast<size_t>(i)]);
            const double wa = in[a] * ci - in[b] * si, wb = in[a] * si + in[b] * ci;
            const double tol = 2e-6 * (std::abs(in[a]) + std::abs(in[b]));
            ASSERT_NEAR(out[a], wa, tol) << isa_name(isa) << " heads=" << sh.heads << " hd=" << sh.head_dim
                                         << " rope=" << sh.rope_dim << " neox=" << neox << " h=" << h << " i=" << i;
            ASSERT_NEAR(out[b], wb, tol) << isa_name(isa) << " neox=" << neox << " h=" << h << " i=" << i;
          }
          for (int d = sh.rope_dim; d < sh.head_dim; ++d)
            ASSERT_EQ(out[d], in[d]) << isa_name(isa) << " an unrotated dim changed: " << d;
        }
      }
    }
  }
}

}  // namespace
}  // namespace edgelm::kernels
