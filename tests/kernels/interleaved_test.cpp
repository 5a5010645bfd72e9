// The interleaved layout: packing keeps every byte, and the interleaved gemm
// (scalar reference and every SIMD kernel) gives the same products as the
// row-layout gemm on the same weights and activations.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/kernels.h"

namespace edgelm::kernels {
namespace {

std::vector<uint8_t> random_matrix(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::vector<uint8_t> w(row_bytes(t, cols) * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    auto f = test::random_floats(cols, rng);
    quantize_row(t, f.data(), w.data() + static_cast<size_t>(r) * row_bytes(t, cols), cols);
  }
  return w;
}

struct Acts {
  std::vector<uint8_t> bytes;
  size_t stride;
};

Acts random_acts(DType wtype, int64_t n_tok, int64_t cols, std::mt19937& rng) {
  Acts a;
  a.stride = act_row_bytes(wtype, cols);
  a.bytes.resize(a.stride * static_cast<size_t>(n_tok));
  for (int64_t t = 0; t < n_tok; ++t) {
    auto f = test::random_floats(cols, rng);
    quantize_activation(Isa::Scalar, wtype, f.data(), a.bytes.data() + static_cast<size_t>(t) * a.stride, cols);
  }
  return a;
}

std::vector<float> run(Isa isa, DType t, Layout layout, const std::vector<uint8_t>& w, const Acts& x, int64_t rows,
                       int64_t cols, int64_t n_tok, int64_t r0, int64_t r1) {
  std::vector<float> y(static_cast<size_t>(rows * n_tok), -7.0f);
  GemmArgs a;
  a.wtype = t;
  a.w = w.data();
  a.w_stride = row_bytes(t, cols);
  a.n = cols;
  a.x = x.bytes.data();
  a.x_stride = x.stride;
  a.n_tok = n_tok;
  a.y = y.data();
  a.ldy = rows;
  a.layout = layout;
  gemm(isa, a, r0, r1);
  return y;
}

// Q4_0 packing moves bytes without changing any (Q8_0 also flips each
// quant's sign bit, which the gemm test covers).
TEST(Interleaved, Q4_0PackingIsAPermutationOfTheBytes) {
  std::mt19937 rng(5);
  auto w = random_matrix(DType::Q4_0, 32, 96, rng);
  std::vector<uint8_t> p(w.size());
  pack_rows(DType::Q4_0, Layout::Interleave16, w.data(), p.data(), 96, 0, 32);
  std::vector<int> hist_w(256), hist_p(256);
  for (uint8_t b : w) hist_w[b]++;
  for (uint8_t b : p) hist_p[b]++;
  EXPECT_EQ(hist_w, hist_p);
}

TEST(Interleaved, EveryIsaMatchesTheRowLayout) {
  std::mt19937 rng(11);
  for (DType t : {DType::Q4_0, DType::Q8_0}) {
    for (int64_t rows : {16, 48, 160}) {
      for (int64_t cols : {32, 64, 1536}) {
        auto w = random_matrix(t, rows, cols, rng);
        std::vector<uint8_t> packed(w.size());
        pack_rows(t, Layout::Interleave16, w.data(), packed.data(), cols, 0, rows);
        for (int64_t n_tok : {1, 2, 3, 7, 8, 9, 17, 33}) {
          const Acts x = random_acts(t, n_tok, cols, rng);
          const int64_t r0 = rows > 16 ? 16 : 0;
          const auto want = run(Isa::Scalar, t, Layout::Rows, w, x, rows, cols, n_tok, r0, rows);
          for (Isa isa : supported_isas()) {
            const auto got = run(isa, t, Layout::Interleave16, packed, x, rows, cols, n_tok, r0, rows);
            for (int64_t tok = 0; tok < n_tok; ++tok) {
              for (int64_t r = 0; r < rows; ++r) {
                const float a = want[static_cast<size_t>(tok * rows + r)];
                const float b = got[static_cast<size_t>(tok * rows + r)];
                ASSERT_NEAR(a, b, 1e-4f * (1.0f + std::fabs(a)))
                    << dtype_name(t) << " " << isa_name(isa) << " rows=" << rows << " cols=" << cols
                    << " n_tok=" << n_tok << " at (" << tok << ", " << r << ")";
              }
            }
          }
        }
      }
    }
  }
}

TEST(Interleaved, PreferredOnlyWhereASimdKernelExists) {
  for (Isa isa : supported_isas()) {
    const Layout l = preferred_layout(isa, DType::Q4_0, 1536, 1536);
    if (isa == Isa::Avx512) {
      EXPECT_EQ(l, Layout::Interleave16);
    }
    if (isa == Isa::Scalar) {
      EXPECT_EQ(l, Layout::Rows);
    }
    EXPECT_EQ(preferred_layout(isa, DType::Q4_0, 1530, 1536), Layout::Rows);  // rows not a multiple of 16
    EXPECT_EQ(preferred_layout(isa, DType::Q6_K, 1536, 1536), Layout::Rows);  // no interleaved kernel
  }
}

}  // namespace
}  // namespace edgelm::kernels

namespace edgelm::kernels {
namespace {

TEST(Interleaved, RowsReadBackFromThePackedLayout) {
  std::mt19937 rng(3);
  for (DType t : {DType::Q4_0, DType::Q8_0}) {
    auto w = random_matrix(t, 48, 128, rng);
    std::vector<uint8_t> p(w.size());
    pack_rows(t, Layout::Interleave16, w.data(), p.data(), 128, 0, 48);
    for (int64_t r : {0, 5, 16, 47}) {
      std::vector<float> want(128), got(128);
      dequantize_row(t, w.data() + static_cast<size_t>(r) * row_bytes(t, 128), want.data(), 128);
      dequantize_packed_row(t, Layout::Interleave16, p.data(), 128, r, got.data());
      EXPECT_EQ(want, got) << dtype_name(t) << " row " << r;
    }
  }
}

}  // namespace
}  // namespace edgelm::kernels
