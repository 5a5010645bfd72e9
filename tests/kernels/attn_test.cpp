// Attention tile kernels on every ISA against the scalar reference: KV row
// conversion (exact), score tiles and P x V accumulation (to float
// rounding), and the promise that a row's results do not depend on the
// shape of the tile it is computed in.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernel_test_util.h"

namespace edgelm::kernels {
namespace {

TEST(AttnTiles, KvToF32IsExactOnEveryIsa) {
  std::mt19937 rng(11);
  for (DType t : {DType::F32, DType::F16, DType::Q8_0}) {
    for (int64_t n : {32, 64, 96, 128, 256}) {
      auto x = test::random_floats(n, rng);
      std::vector<uint8_t> row(row_bytes(t, n));
      store_kv(t, x.data(), row.data(), n);
      const auto want = test::dequantize(t, row.data(), n);
      for (Isa isa : supported_isas()) {
        std::vector<float> got(static_cast<size_t>(n), -1.0f);
        kv_to_f32(isa, t, row.data(), row.size(), 1, got.data(), n);
        EXPECT_EQ(got, want) << dtype_name(t) << " " << isa_name(isa) << " n=" << n;
      }
    }
  }
  // Float rows of any length.
  for (int64_t n : {1, 7, 15, 17, 40}) {
    auto x = test::random_floats(n, rng);
    std::vector<uint8_t> row(row_bytes(DType::F16, n));
    store_kv(DType::F16, x.data(), row.data(), n);
    const auto want = test::dequantize(DType::F16, row.data(), n);
    for (Isa isa : supported_isas()) {
      std::vector<float> got(static_cast<size_t>(n));
      kv_to_f32(isa, DType::F16, row.data(), row.size(), 1, got.data(), n);
      EXPECT_EQ(got, want) << isa_name(isa) << " n=" << n;
    }
  }
}

// Several rows at a stride (a head's rows inside whole cache rows).
TEST(AttnTiles, KvToF32StridedRows) {
  std::mt19937 rng(14);
  const int rows = 5, heads = 3;
  const int64_t n = 64;
  for (DType t : {DType::F32, DType::F16, DType::Q8_0}) {
    // A stride past the heads (8 bytes more, keeping the rows as aligned as a
    // cache keeps them: f32 rows on 4 bytes).
    const size_t head = row_bytes(t, n), stride = head * heads + 8;
    std::vector<uint8_t> cache(stride * rows);
    std::vector<float> want;
    for (int r = 0; r < rows; ++r) {
      for (int h = 0; h < heads; ++h) {
        auto x = test::random_floats(n, rng);
        store_kv(t, x.data(), cache.data() + r * stride + h * head, n);
      }
      const auto d = test::dequantize(t, cache.data() + r * stride + 1 * head, n);
      want.insert(want.end(), d.begin(), d.end());
    }
    for (Isa isa : supported_isas()) {
      std::vector<float> got(want.size());
      kv_to_f32(isa, t, cache.data() + head, stride, rows, got.data(), n);
      EXPECT_EQ(got, want) << dtype_name(t) << " " << isa_name(isa);
    }
  }
}

struct TileShape {
  int nq, nk;
  int64_t d;
};
const TileShape kShapes[] = {{1, 1, 8},   {6, 64, 128}, {7, 33, 64}, {4, 2, 128}, {13, 64, 80},
                             {2, 5, 17},  {48, 64, 128}, {3, 7, 96}, {5, 3, 1},   {9, 31, 40},
                             {6, 61, 128}, {8, 64, 128}, {12, 9, 64}, {14, 64, 64}};

TEST(AttnTiles, ScoresMatchScalar) {
  std::mt19937 rng(12);
  for (const TileShape& sh : kShapes) {
    auto q = test::random_floats(sh.nq * sh.d, rng);
    auto k = test::random_floats(sh.nk * sh.d, rng);
    const int64_t lds = sh.nk + 3;
    std::vector<float> want(static_cast<size_t>(sh.nq * lds), 0.0f);
    attn_scores(Isa::Scalar, q.data(), sh.nq, k.data(), sh.nk, sh.d, want.data(), lds);
    for (int i = 0; i < sh.nq; ++i) {
      for (int j = 0; j < sh.nk; ++j) {
        double exact = 0;
        for (int64_t c = 0; c < sh.d; ++c) exact += static_cast<double>(q[i * sh.d + c]) * k[j * sh.d + c];
        ASSERT_NEAR(want[i * lds + j], exact, 1e-5 * (1 + std::sqrt(static_cast<double>(sh.d))));
      }
    }
    for (Isa isa : supported_isas()) {
      std::vector<float> got(want.size(), 0.0f);
      attn_scores(isa, q.data(), sh.nq, k.data(), sh.nk, sh.d, got.data(), lds);
      for (int i = 0; i < sh.nq; ++i)
        for (int j = 0; j < sh.nk; ++j)
          ASSERT_NEAR(got[i * lds + j], want[i * lds + j], 2e-5 * (1 + std::sqrt(static_cast<double>(sh.d))))
              << isa_name(isa) << " nq=" << sh.nq << " nk=" << sh.nk << " d=" << sh.d;
      // Row by row and key by key: the same bits as the whole tile.
      for (int i = 0; i < sh.nq; ++i) {
        for (int j = 0; j < sh.nk; ++j) {
          float one = 0;
          attn_scores(isa, q.data() + i * sh.d, 1, k.data() + j * sh.d, 1, sh.d, &one, 1);
          ASSERT_EQ(one, got[i * lds + j]) << isa_name(isa) << " i=" << i << " j=" << j;
        }
      }
    }
  }
}

// nq rows of probability-like weights in [0, 1), ldp floats apart.
std::vector<float> weights(int nq, int64_t ldp, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> p(static_cast<size_t>(nq * ldp));
  for (auto& x : p) x = u(rng);
  return p;
}

TEST(AttnTiles, AccumulateMatchesScalar) {
  std::mt19937 rng(13);
  for (const TileShape& sh : kShapes) {
    const int64_t ldp = sh.nk + 1;
    const std::vector<float> p = weights(sh.nq, ldp, rng);
    auto v = test::random_floats(sh.nk * sh.d, rng);
    auto o0 = test::random_floats(sh.nq * sh.d, rng);
    auto want = o0;
    attn_accumulate(Isa::Scalar, p.data(), ldp, sh.nq, v.data(), sh.nk, sh.d, want.data());
    for (int i = 0; i < sh.nq; ++i) {
      for (int64_t c = 0; c < sh.d; ++c) {
        double exact = o0[i * sh.d + c], mag = std::fabs(exact);
        for (int j = 0; j < sh.nk; ++j) {
          exact += static_cast<double>(p[i * ldp + j]) * v[j * sh.d + c];
          mag += std::fabs(static_cast<double>(p[i * ldp + j]) * v[j * sh.d + c]);
        }
        ASSERT_NEAR(want[i * sh.d + c], exact, 1e-6 * mag * sh.nk + 1e-30);
      }
    }
    for (Isa isa : supported_isas()) {
      auto got = o0;
      attn_accumulate(isa, p.data(), ldp, sh.nq, v.data(), sh.nk, sh.d, got.data());
      for (size_t e = 0; e < got.size(); ++e)
        ASSERT_NEAR(got[e], want[e], 2e-6 * (sh.nk + 1) * (1 + std::fabs(want[e])))
            << isa_name(isa) << " nq=" << sh.nq << " nk=" << sh.nk << " d=" << sh.d << " e=" << e;
      // One row at a time gives the same bits.
      for (int i = 0; i < sh.nq; ++i) {
        std::vector<float> one(o0.begin() + i * sh.d, o0.begin() + (i + 1) * sh.d);
        attn_accumulate(isa, p.data() + i * ldp, ldp, 1, v.data(), sh.nk, sh.d, one.data());
        for (int64_t c = 0; c < sh.d; ++c) ASSERT_EQ(one[c], got[i * sh.d + c]) << isa_name(isa) << " i=" << i;
      }
    }
  }
}

// nk rows of d elements as F16 cache rows, and the floats they hold.
struct F16Rows {
  std::vector<uint16_t> h;
  std::vector<float> f;
};
F16Rows f16_rows(int nk, int64_t d, std::mt19937& rng) {
  F16Rows r;
  r.h.resize(static_cast<size_t>(nk * d));
  for (int j = 0; j < nk; ++j) {
    auto x = test::random_floats(d, rng);
    store_kv(DType::F16, x.data(), r.h.data() + j * d, d);
  }
  r.f = test::dequantize(DType::F16, r.h.data(), nk * d);
  return r;
}

// F16 rows read in place: the same bits as the f32 kernel on the rows
// converted first, on every ISA; and the same again with rows to request
// ahead (all of a next block's, or fewer than the kernel reads), which are
// a hint only.
TEST(AttnTiles, ScoresFromF16RowsMatchConvertedRows) {
  std::mt19937 rng(16);
  for (const TileShape& sh : kShapes) {
    auto q = test::random_floats(sh.nq * sh.d, rng);
    const F16Rows k = f16_rows(sh.nk, sh.d, rng), next = f16_rows(sh.nk, sh.d, rng);
    const int64_t lds = sh.nk + 2;
    for (Isa isa : supported_isas()) {
      std::vector<float> want(static_cast<size_t>(sh.nq * lds), 7.0f), got = want;
      attn_scores(isa, q.data(), sh.nq, k.f.data(), sh.nk, sh.d, want.data(), lds);
      attn_scores_f16(isa, q.data(), sh.nq, k.h.data(), sh.nk, sh.d, got.data(), lds);
      ASSERT_EQ(got, want) << isa_name(isa) << " nq=" << sh.nq << " nk=" << sh.nk << " d=" << sh.d;
      for (int n_ahead : {sh.nk, sh.nk / 2}) {
        std::vector<float> ahead(want.size(), 7.0f);
        attn_scores_f16(isa, q.data(), sh.nq, k.h.data(), sh.nk, sh.d, ahead.data(), lds,
                        next.h.data(), n_ahead);
        ASSERT_EQ(ahead, want) << isa_name(isa) << " nq=" << sh.nq << " nk=" << sh.nk
                               << " n_ahead=" << n_ahead;
      }
    }
  }
}

TEST(AttnTiles, AccumulateFromF16RowsMatchesConvertedRows) {
  std::mt19937 rng(17);
  for (const TileShape& sh : kShapes) {
    const int64_t ldp = sh.nk + 3;
    const std::vector<float> p = weights(sh.nq, ldp, rng);
    const F16Rows v = f16_rows(sh.nk, sh.d, rng), next = f16_rows(sh.nk, sh.d, rng);
    const auto o0 = test::random_floats(sh.nq * sh.d, rng);
    for (Isa isa : supported_isas()) {
      auto want = o0, got = o0;
      attn_accumulate(isa, p.data(), ldp, sh.nq, v.f.data(), sh.nk, sh.d, want.data());
      attn_accumulate_f16(isa, p.data(), ldp, sh.nq, v.h.data(), sh.nk, sh.d, got.data());
      ASSERT_EQ(got, want) << isa_name(isa) << " nq=" << sh.nq << " nk=" << sh.nk << " d=" << sh.d;
      for (int n_ahead : {sh.nk, sh.nk / 2}) {
        auto ahead = o0;
        attn_accumulate_f16(isa, p.data(), ldp, sh.nq, v.h.data(), sh.nk, sh.d, ahead.data(),
                            next.h.data(), n_ahead);
        ASSERT_EQ(ahead, want) << isa_name(isa) << " nq=" << sh.nq << " nk=" << sh.nk
                               << " n_ahead=" << n_ahead;
      }
    }
  }
}

// The max is exact, so every ISA returns the reference's value: the largest
// element wherever it stands (first, last, in a vector's tail or body), of
// rows shorter and longer than a vector, including infinite scores.
TEST(AttnTiles, MaxMatchesScalar) {
  std::mt19937 rng(16);
  std::uniform_real_distribution<float> u(-50.0f, 10.0f);
  auto expect_max = [](const std::vector<float>& s, float want, const char* what) {
    const int n = static_cast<int>(s.size());
    for (Isa isa : supported_isas())
      ASSERT_EQ(attn_max(isa, s.data(), n), want) << isa_name(isa) << " n=" << n << " " << what;
  };
  for (int n : {1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 100}) {
    for (int at = 0; at < n; at += (n > 8 ? n / 5 + 1 : 1)) {
      const auto i = static_cast<size_t>(at);
      std::vector<float> s(static_cast<size_t>(n));
      for (auto& x : s) x = u(rng);
      s[i] = 20.0f + static_cast<float>(at);
      ASSERT_EQ(attn_max(Isa::Scalar, s.data(), n), s[i]) << "n=" << n << " at=" << at;
      expect_max(s, s[i], "largest inside");
      s.back() = 1000.0f;
      expect_max(s, 1000.0f, "largest last");
      std::fill(s.begin(), s.end(), -3.25f);
      expect_max(s, -3.25f, "all equal");
      s[i] = -INFINITY;
      expect_max(s, n > 1 ? -3.25f : -INFINITY, "one -inf");
      s[i] = INFINITY;
      expect_max(s, INFINITY, "one +inf");
    }
  }
  for (Isa isa : supported_isas()) ASSERT_EQ(attn_max(isa, nullptr, 0), -INFINITY) << isa_name(isa);
}

TEST(AttnTiles, ExpSumMatchesScalar) {
  std::mt19937 rng(15);
  std::uniform_real_distribution<float> u(-95.0f, 0.0f);
  for (int n : {1, 3, 8, 15, 16, 17, 31, 64, 100}) {
    for (float m : {0.0f, 3.5f, -20.0f}) {
      std::vector<float> s0(static_cast<size_t>(n));
      for (auto& x : s0) x = m + (u(rng) > -10.0f ? u(rng) / 10.0f : u(rng));
      s0[0] = m;  // the row's max: exp(0) = 1
      auto want = s0;
      const float want_sum = attn_exp_sum(Isa::Scalar, want.data(), n, m);
      for (int j = 0; j < n; ++j) ASSERT_NEAR(want[j], std::exp(static_cast<double>(s0[j]) - m), 1e-7 * want[j] + 1e-38);
      for (Isa isa : supported_isas()) {
        auto got = s0;
        const float sum = attn_exp_sum(isa, got.data(), n, m);
        for (int j = 0; j < n; ++j) {
          // A few ulp; below 2^-126 the SIMD paths may flush to zero.
          const double tol = want[j] < 1.2e-38f ? 1.2e-38 : 6e-7 * want[j];
          ASSERT_NEAR(got[j], want[j], tol) << isa_name(isa) << " n=" << n << " j=" << j << " x=" << s0[j] - m;
        }
        ASSERT_NEAR(sum, want_sum, 1e-6 * want_sum) << isa_name(isa) << " n=" << n;
      }
    }
  }
}

}  // namespace
}  // namespace edgelm::kernels
