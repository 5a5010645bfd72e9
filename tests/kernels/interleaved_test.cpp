// The interleaved layout: packing keeps every byte (Q4_0) or every value
// (the K formats, whose scales are unpacked), rows read back exactly, and the
// interleaved gemm (scalar reference and every SIMD kernel) gives the same
// products as the row-layout gemm on the same weights and activations.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

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

// The formats with an interleaved layout.
const std::vector<DType>& packed_types() {
  static const std::vector<DType> v = {DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q4_1,
                                       DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  return v;
}

bool is_kquant(DType t) { return dtype_info(t).block_size == 256; }

std::vector<uint8_t> pack(DType t, const std::vector<uint8_t>& w, int64_t rows, int64_t cols) {
  std::vector<uint8_t> p(packed_bytes(t, Layout::Interleave16, rows, cols));
  pack_rows(t, Layout::Interleave16, w.data(), p.data(), cols, 0, rows);
  return p;
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

// The 32-element formats' groups go in pairs, block by block: block b of
// group g starts at (2 nb (g / 2) + 2b + g % 2) x 288 bytes for Q4_0 (nb
// blocks per row), its 16 rows' scales first; a lone last group (48 rows)
// keeps the same places, its partner's left as padding.
TEST(Interleaved, Q4_0GroupsArePairedBlockByBlock) {
  std::mt19937 rng(6);
  const int64_t rows = 48, cols = 64, nb = 2;
  const auto w = random_matrix(DType::Q4_0, rows, cols, rng);
  const auto p = pack(DType::Q4_0, w, rows, cols);
  ASSERT_EQ(p.size(), static_cast<size_t>(2 * nb * 288 * 2));
  const auto* blocks = reinterpret_cast<const BlockQ4_0*>(w.data());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t g = r / 16;
    for (int64_t b = 0; b < nb; ++b) {
      const size_t at =
          static_cast<size_t>((2 * nb * (g / 2) + 2 * b + g % 2) * 288 + 2 * (r % 16));
      uint16_t d;
      std::memcpy(&d, p.data() + at, 2);
      EXPECT_EQ(d, blocks[r * nb + b].d) << "row " << r << " block " << b;
    }
  }
}

// Q8_0's groups follow one another (its prompt tiles read one group's
// blocks as one stream; interleaved_driver.h's GroupBlocks).
TEST(Interleaved, Q8_0GroupsFollowOneAnother) {
  std::mt19937 rng(7);
  const int64_t rows = 48, cols = 64, nb = 2;
  const auto w = random_matrix(DType::Q8_0, rows, cols, rng);
  const auto p = pack(DType::Q8_0, w, rows, cols);
  ASSERT_EQ(p.size(), static_cast<size_t>(rows / 16 * nb * 544));
  const auto* blocks = reinterpret_cast<const BlockQ8_0*>(w.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const size_t at = static_cast<size_t>((nb * (r / 16) + b) * 544 + 2 * (r % 16));
      uint16_t d;
      std::memcpy(&d, p.data() + at, 2);
      EXPECT_EQ(d, blocks[r * nb + b].d) << "row " << r << " block " << b;
    }
  }
}

// Compares every ISA's interleaved gemm with the scalar row-layout gemm on
// rows [16, rows) (or all of a single group) for several token counts.
void expect_matches_rows(DType t, const std::vector<uint8_t>& w, int64_t rows, int64_t cols, std::mt19937& rng) {
  const auto packed = pack(t, w, rows, cols);
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
              << dtype_name(t) << " " << isa_name(isa) << " rows=" << rows << " cols=" << cols << " n_tok=" << n_tok
              << " at (" << tok << ", " << r << ")";
        }
      }
    }
  }
}

TEST(Interleaved, EveryIsaMatchesTheRowLayout) {
  std::mt19937 rng(11);
  for (DType t : packed_types()) {
    for (int64_t rows : {16, 48, 160}) {
      const std::vector<int64_t> widths = is_kquant(t) ? std::vector<int64_t>{256, 768, 2304}
                                                       : std::vector<int64_t>{32, 64, 1536};
      for (int64_t cols : widths) expect_matches_rows(t, random_matrix(t, rows, cols, rng), rows, cols, rng);
    }
  }
}

// Uniformly random bits: every quant, scale and minimum value occurs,
// extremes included (Q6_K scales of -128, 6-bit scales and minimums of 63,
// Q5_0's fifth bits in every combination, -16 and 15 among its values,
// Q5_1's 0 and 31, minimums of either sign).
TEST(Interleaved, RandomBitsMatchTheRowLayout) {
  std::mt19937 rng(12);
  for (DType t : {DType::Q5_0, DType::Q8_0, DType::Q4_1, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    for (int64_t rows : {32, 64}) {
      for (int64_t cols : {256, 1536}) expect_matches_rows(t, test::random_weights(t, rows, cols, rng), rows, cols, rng);
    }
  }
}

// The largest quants (every byte but the f16 scales set to 0xFF: Q4_0 and
// Q4_K nibbles of 15, Q5_0 15, Q5_K 31, Q6_K 63, the largest 6-bit scales;
// then 0x80 and 0x7F: Q8_0's -128 and 127) against activations of +127 or
// -127 everywhere: the sums the AVX2 kernels keep in 16 bits reach their
// bound (8 x 2 x 15 x 127 = 30480 for Q4_0 and Q4_K, 2 x 128 x 127 for
// Q8_0) and must not wrap.
TEST(Interleaved, LargestQuantsAndActivationsDoNotOverflow) {
  std::mt19937 rng(13);
  for (DType t : packed_types()) {
   for (uint8_t fill : {uint8_t{0xFF}, uint8_t{0x80}, uint8_t{0x7F}}) {
    const int64_t rows = 32, cols = is_kquant(t) ? 512 : 256;
    auto w = test::random_weights(t, rows, cols, rng);
    const size_t bs = dtype_info(t).type_size;
    std::vector<bool> scale_byte(bs);
    for (test::HalfField h : test::half_fields(t)) scale_byte[static_cast<size_t>(h.offset)] = scale_byte[static_cast<size_t>(h.offset) + 1] = true;
    for (size_t i = 0; i < w.size(); ++i)
      if (!scale_byte[i % bs]) w[i] = fill;
    const auto packed = pack(t, w, rows, cols);
    for (float sign : {1.0f, -1.0f}) {
     for (int64_t n_tok : {1, 5}) {  // the decode pass and a prompt tile
      Acts x;
      x.stride = act_row_bytes(t, cols);
      x.bytes.resize(x.stride * n_tok);
      const std::vector<float> f(static_cast<size_t>(cols), sign);
      for (int64_t k = 0; k < n_tok; ++k)
        quantize_activation(Isa::Scalar, t, f.data(), x.bytes.data() + static_cast<size_t>(k) * x.stride, cols);
      const auto want = run(Isa::Scalar, t, Layout::Rows, w, x, rows, cols, n_tok, 0, rows);
      for (Isa isa : supported_isas()) {
        const auto got = run(isa, t, Layout::Interleave16, packed, x, rows, cols, n_tok, 0, rows);
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i])))
              << dtype_name(t) << " " << isa_name(isa) << " fill " << int{fill} << " sign " << sign << " n_tok "
              << n_tok << " at " << i;
      }
     }
    }
   }
  }
}

// An activation row depends only on its format, not on the weights it
// meets: Forward quantizes one input once for several matrices (attn_q, k,
// v), whose formats may differ (a Q4_K mix falls back to Q5_0 and Q8_0 on
// rows that are no multiple of 256). Each interleaved kernel removes its own
// offset from the block sums in the row's trailer.
TEST(Interleaved, ActivationRowsDependOnlyOnTheirFormat) {
  std::mt19937 rng(21);
  const auto f = test::random_floats(256, rng);
  for (const std::vector<DType>& same : {std::vector<DType>{DType::Q4_0, DType::Q5_0, DType::Q8_0},
                                         std::vector<DType>{DType::Q4_1, DType::Q5_1}}) {
    for (Isa isa : supported_isas()) {
      std::vector<uint8_t> first;
      for (DType t : same) {
        std::vector<uint8_t> row(act_row_bytes(t, 256));
        quantize_activation(isa, t, f.data(), row.data(), 256);
        if (first.empty()) first = row;
        EXPECT_EQ(row, first) << dtype_name(t) << " " << isa_name(isa);
      }
    }
  }
}

TEST(Interleaved, PreferredOnlyWhereASimdKernelExists) {
  for (Isa isa : supported_isas()) {
    // So the comparisons above ran each ISA's own kernel, not the scalar
    // reference it would fall back to.
    const bool x86 = isa == Isa::Avx2 || isa == Isa::AvxVnni || isa == Isa::Avx512;
    const Layout l = preferred_layout(isa, DType::Q4_0, 1536, 1536);
    EXPECT_EQ(l, x86 || isa == Isa::Neon ? Layout::Interleave16 : Layout::Rows) << isa_name(isa);
    EXPECT_EQ(preferred_layout(isa, DType::Q8_0, 1536, 1536), x86 || isa == Isa::Neon ? Layout::Interleave16 : Layout::Rows)
        << isa_name(isa);
    for (DType t : {DType::Q4_K, DType::Q6_K}) {
      EXPECT_EQ(preferred_layout(isa, t, 1536, 8960), x86 || isa == Isa::Neon ? Layout::Interleave16 : Layout::Rows)
          << dtype_name(t) << " " << isa_name(isa);
      EXPECT_EQ(preferred_layout(isa, t, 1530, 1536), Layout::Rows);
    }
    for (DType t : {DType::Q5_0, DType::Q4_1, DType::Q5_1})
      EXPECT_EQ(preferred_layout(isa, t, 896, 896), x86 || isa == Isa::Neon ? Layout::Interleave16 : Layout::Rows)
          << dtype_name(t) << " " << isa_name(isa);
    EXPECT_EQ(preferred_layout(isa, DType::Q4_0, 1530, 1536), Layout::Rows);  // rows not a multiple of 16
    EXPECT_EQ(preferred_layout(isa, DType::Q3_K, 1536, 1536), Layout::Rows);  // no interleaved kernel
  }
}

// Which NEON prompt kernel the comparisons above ran: interleaved_neon.cpp
// takes token pairs by smmla where HWCAP2_I8MM is set, else sdot.
// scripts/test-aarch64.sh runs the tests on a core of each kind and checks
// this line, so both paths are compared with the row layout.
TEST(Interleaved, ReportsNeonI8mm) {
#if defined(__aarch64__) && defined(__linux__) && defined(HWCAP2_I8MM)
  std::cout << "[          ] neon i8mm: " << ((getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0 ? "yes" : "no") << "\n";
#else
  GTEST_SKIP() << "not aarch64 Linux";
#endif
}

// The 32-element formats keep their size, but for a lone last group, padded
// to a pair; the K formats' unpacked scales cost 64 bytes per group and
// super-block (Q4_K, Q5_K) or nothing (Q6_K).
TEST(Interleaved, PackedSizes) {
  for (DType t : packed_types()) EXPECT_EQ(packed_bytes(t, Layout::Rows, 48, 1536), row_bytes(t, 1536) * 48);
  // Groups in pairs: a lone last group is padded to a pair.
  for (DType t : {DType::Q4_0, DType::Q5_0, DType::Q4_1, DType::Q5_1}) {
    EXPECT_EQ(packed_bytes(t, Layout::Interleave16, 64, 1536), row_bytes(t, 1536) * 64)
        << dtype_name(t);
    EXPECT_EQ(packed_bytes(t, Layout::Interleave16, 48, 1536), row_bytes(t, 1536) * 64)
        << dtype_name(t);
    EXPECT_EQ(packed_bytes(t, Layout::Interleave16, 16, 1536), row_bytes(t, 1536) * 32)
        << dtype_name(t);
  }
  EXPECT_EQ(packed_bytes(DType::Q8_0, Layout::Interleave16, 48, 1536),
            row_bytes(DType::Q8_0, 1536) * 48);
  EXPECT_EQ(packed_bytes(DType::Q4_K, Layout::Interleave16, 48, 1536), row_bytes(DType::Q4_K, 1536) * 48 + 3 * 6 * 64);
  EXPECT_EQ(packed_bytes(DType::Q5_K, Layout::Interleave16, 48, 1536), row_bytes(DType::Q5_K, 1536) * 48 + 3 * 6 * 64);
  EXPECT_EQ(packed_bytes(DType::Q6_K, Layout::Interleave16, 48, 1536), row_bytes(DType::Q6_K, 1536) * 48);
}

// Model::pack_for splits a matrix's groups across threads: packing row
// ranges one by one gives the same bytes as packing the whole matrix.
TEST(Interleaved, PackingRowRangesMatchesPackingAll) {
  std::mt19937 rng(4);
  for (DType t : packed_types()) {
    const int64_t cols = is_kquant(t) ? 512 : 96;
    auto w = random_matrix(t, 64, cols, rng);
    const auto all = pack(t, w, 64, cols);
    std::vector<uint8_t> parts(all.size(), 0xAB);
    for (int64_t r0 : {48, 0, 32, 16}) pack_rows(t, Layout::Interleave16, w.data(), parts.data(), cols, r0, r0 + 16);
    EXPECT_EQ(all, parts) << dtype_name(t);
  }
}

}  // namespace
}  // namespace edgelm::kernels

namespace edgelm::kernels {
namespace {

TEST(Interleaved, RowsReadBackFromThePackedLayout) {
  std::mt19937 rng(3);
  for (DType t : packed_types()) {
    const int64_t cols = is_kquant(t) ? 768 : 128;
    // Quantized values, and for the K formats also random bits (every
    // scale, minimum and quant value).
    std::vector<std::vector<uint8_t>> mats = {random_matrix(t, 48, cols, rng)};
    if (is_kquant(t)) mats.push_back(test::random_weights(t, 48, cols, rng));
    for (const auto& w : mats) {
      const auto p = pack(t, w, 48, cols);
      for (int64_t r : {0, 5, 16, 31, 47}) {
        std::vector<float> want(static_cast<size_t>(cols)), got(static_cast<size_t>(cols));
        dequantize_row(t, w.data() + static_cast<size_t>(r) * row_bytes(t, cols), want.data(), cols);
        dequantize_packed_row(t, Layout::Interleave16, p.data(), cols, r, got.data());
        EXPECT_EQ(want, got) << dtype_name(t) << " row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace edgelm::kernels
