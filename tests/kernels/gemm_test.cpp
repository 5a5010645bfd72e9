// gemm and quantize_activation: every ISA against the scalar reference, and
// the scalar reference against a double-precision dot product of the
// dequantized operands.

#include <gtest/gtest.h>

#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include <cmath>
#include <cstddef>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.h"

namespace edgelm::kernels {
namespace {

using test::dequantize;

// One problem: `rows` weight rows, `n_tok` activation rows, computed for
// rows [r0, r1). Activation rows are padded by 64 bytes and y rows by 3
// floats, so strides are exercised; cells outside the range must stay NaN.
struct Problem {
  DType wtype;
  int64_t n, rows, n_tok, r0, r1;
  std::vector<uint8_t> w;
  std::vector<float> xf;   // f32 activations (n_tok x n)
  std::vector<uint8_t> x;  // activations in act_type(wtype)
  size_t x_stride;
  int64_t ldy;

  GemmArgs args(float* y) const {
    return GemmArgs{wtype, w.data(), row_bytes(wtype, n), n, x.data(), x_stride, n_tok, y, ldy};
  }
  std::vector<float> run(Isa isa) const {
    std::vector<float> y(static_cast<size_t>(n_tok * ldy), NAN);
    gemm(isa, args(y.data()), r0, r1);
    return y;
  }
};

Problem make_problem(DType t, int64_t n, int64_t rows, int64_t n_tok, int64_t r0, int64_t r1,
                     std::mt19937& rng, bool random_bits) {
  Problem p{t, n, rows, n_tok, r0, r1, {}, {}, {}, 0, rows + 3};
  p.w = random_bits ? test::random_weights(t, rows, n, rng)
                    : test::quantized_weights(t, rows, n, rng);
  p.xf = test::random_floats(n * n_tok, rng);
  p.x_stride = act_row_bytes(t, n) + 64;
  p.x.assign(p.x_stride * static_cast<size_t>(n_tok), 0xcd);
  for (int64_t i = 0; i < n_tok; ++i) {
    quantize_activation(Isa::Scalar, t, p.xf.data() + i * n, p.x.data() + i * p.x_stride, n);
  }
  return p;
}

// Per output cell: the exact dot product of the dequantized operands, and
// the magnitude that rounding errors scale with (sum of |w x| plus, for
// formats with an additive offset per block, sum of |offset x|).
struct Exact {
  std::vector<double> dot, mag, offset_mag;
};

Exact exact(const Problem& p) {
  Exact e;
  const size_t cells = static_cast<size_t>(p.n_tok * p.ldy);
  e.dot.assign(cells, 0);
  e.mag.assign(cells, 0);
  e.offset_mag.assign(cells, 0);
  const DType at = act_type(p.wtype);
  const auto zero = test::zero_quants(p.wtype, p.w);
  const size_t rb = row_bytes(p.wtype, p.n);
  for (int64_t t = 0; t < p.n_tok; ++t) {
    const auto x = dequantize(at, p.x.data() + t * p.x_stride, p.n);
    for (int64_t r = p.r0; r < p.r1; ++r) {
      const auto w = dequantize(p.wtype, p.w.data() + r * rb, p.n);
      const auto off = dequantize(p.wtype, zero.data() + r * rb, p.n);
      double dot = 0, mag = 0, omag = 0;
      for (int64_t i = 0; i < p.n; ++i) {
        dot += static_cast<double>(w[i]) * x[i];
        mag += std::fabs(static_cast<double>(w[i]) * x[i]) +
               std::fabs(static_cast<double>(off[i]) * x[i]);
        omag += std::fabs(static_cast<double>(off[i]) * x[i]);
      }
      const size_t c = static_cast<size_t>(t * p.ldy + r);
      e.dot[c] = dot;
      e.mag[c] = mag;
      e.offset_mag[c] = omag;
    }
  }
  return e;
}

void expect_untouched_outside_range(const Problem& p, const std::vector<float>& y, Isa isa) {
  for (int64_t t = 0; t < p.n_tok; ++t) {
    for (int64_t r = 0; r < p.ldy; ++r) {
      if (r >= p.r0 && r < p.r1) continue;
      ASSERT_TRUE(std::isnan(y[t * p.ldy + r])) << isa_name(isa) << " wrote t=" << t << " r=" << r;
    }
  }
}

struct Shape {
  int64_t n, rows, n_tok, r0, r1;
};

std::vector<Shape> shapes_for(DType t) {
  const int64_t bs = test::block_size(t) == 1 ? 32 : test::block_size(t);
  std::vector<Shape> s;
  const int64_t toks[] = {1, 2, 3, 4, 5, 8, 17};
  const int64_t lens[] = {bs, 2 * bs, 3 * bs, 4096};
  int k = 0;
  for (int64_t n : lens) {
    for (int64_t nt : toks) {
      // Vary the row range: full tiles, a remainder, a single row, start > 0.
      const Shape options[] = {
          {n, 16, nt, 0, 16}, {n, 19, nt, 3, 19}, {n, 11, nt, 2, 9}, {n, 6, nt, 5, 6}};
      s.push_back(options[k++ % 4]);
    }
  }
  s.push_back({bs, 64, 32, 0, 64});
  // Enough tokens of a long row that the gemm splits them into several
  // chunks (tile_driver.h keeps ~256 KiB of activations per chunk).
  s.push_back({4096, 5, 70, 0, 5});
  s.push_back({std::max<int64_t>(bs, 1536), 9, 9, 1, 9});
  return s;
}

class Gemm : public ::testing::TestWithParam<DType> {};

// Every ISA the CPU has against the scalar reference. Integer dot products
// agree to float rounding of the per-block sums: relative 1e-5 of the
// magnitude; for float weights the ordering of the sum is the only
// difference and the same bound holds.
TEST_P(Gemm, EveryIsaMatchesScalar) {
  const DType t = GetParam();
  std::mt19937 rng(static_cast<unsigned>(t) * 7919u + 1);
  for (const Shape& s : shapes_for(t)) {
    for (bool random_bits : {true, false}) {
      Problem p = make_problem(t, s.n, s.rows, s.n_tok, s.r0, s.r1, rng, random_bits);
      const auto want = p.run(Isa::Scalar);
      const Exact e = exact(p);
      for (Isa isa : supported_isas()) {
        SCOPED_TRACE(testing::Message() << dtype_name(t) << " " << isa_name(isa) << " n=" << s.n
                                        << " n_tok=" << s.n_tok << " rows=[" << s.r0 << "," << s.r1
                                        << ") random_bits=" << random_bits);
        const auto got = p.run(isa);
        expect_untouched_outside_range(p, got, isa);
        for (int64_t tok = 0; tok < s.n_tok; ++tok) {
          for (int64_t r = s.r0; r < s.r1; ++r) {
            const size_t c = static_cast<size_t>(tok * p.ldy + r);
            ASSERT_NEAR(got[c], want[c], 1e-5 * e.mag[c] + 1e-30) << "t=" << tok << " r=" << r;
          }
        }
      }
    }
  }
}

// The scalar integer-dot math against double arithmetic on the dequantized
// operands. Q4_1/Q5_1 take the activation sum from Q8_1's f16 `s`, which is
// rounded to 11 bits: that term gets a 2^-10 relative allowance.
TEST_P(Gemm, ScalarMatchesDoublePrecisionDot) {
  const DType t = GetParam();
  std::mt19937 rng(static_cast<unsigned>(t) * 104729u + 3);
  const bool q8_1 = act_type(t) == DType::Q8_1;
  for (const Shape& s : shapes_for(t)) {
    for (bool random_bits : {true, false}) {
      Problem p = make_problem(t, s.n, s.rows, s.n_tok, s.r0, s.r1, rng, random_bits);
      const auto got = p.run(Isa::Scalar);
      const Exact e = exact(p);
      for (int64_t tok = 0; tok < s.n_tok; ++tok) {
        for (int64_t r = s.r0; r < s.r1; ++r) {
          const size_t c = static_cast<size_t>(tok * p.ldy + r);
          const double tol = 1e-5 * e.mag[c] + (q8_1 ? e.offset_mag[c] / 1024 : 0) + 1e-30;
          ASSERT_NEAR(got[c], e.dot[c], tol)
              << dtype_name(t) << " n=" << s.n << " t=" << tok << " r=" << r;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, Gemm, ::testing::ValuesIn(test::weight_types()),
                         [](const auto& tp) { return std::string(dtype_name(tp.param)); });

TEST(GemmDispatch, UnavailableIsaFallsBack) {
  std::mt19937 rng(5);
  Problem p = make_problem(DType::Q4_0, 256, 8, 3, 0, 8, rng, true);
  const auto want = p.run(Isa::Scalar);
  // Neon on x86 (or AVX on ARM) is not available: it must still compute.
  for (Isa isa : {Isa::Neon, Isa::Avx512, Isa::AvxVnni, Isa::Avx2}) {
    const auto got = p.run(isa);
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::isnan(want[i])) continue;
      ASSERT_NEAR(got[i], want[i], 1e-3 * (std::fabs(want[i]) + 1)) << isa_name(isa);
    }
  }
  EXPECT_EQ(supported_isas().front(), Isa::Scalar);
  EXPECT_EQ(best_isa(), supported_isas().back());
}

TEST(GemmDispatch, DetectsTheCpusIsas) {
  std::string names;
  for (Isa isa : supported_isas()) names += std::string(isa_name(isa)) + " ";
  RecordProperty("isas", names);
  std::cout << "[          ] supported ISAs: " << names << "\n";
  const auto has = [](Isa isa) {
    for (Isa i : supported_isas())
      if (i == isa) return true;
    return false;
  };
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  __get_cpuid(1, &a, &b, &c, &d);
  const bool f16c = (c & bit_F16C) != 0;  // clang's __builtin_cpu_supports lacks "f16c"
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c &&
                    __builtin_cpu_supports("bmi2");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
  // AVX-VNNI: CPUID leaf 7, sub-leaf 1, EAX bit 4.
  __get_cpuid_count(7, 1, &a, &b, &c, &d);
  const bool avxvnni = avx2 && ((a >> 4) & 1u);
  EXPECT_EQ(has(Isa::Avx2), avx2);
  EXPECT_EQ(has(Isa::AvxVnni), avxvnni);
  EXPECT_EQ(has(Isa::Avx512), avx512);
  EXPECT_FALSE(has(Isa::Neon));
#elif defined(__aarch64__)
  const unsigned long hw = getauxval(AT_HWCAP);
  EXPECT_EQ(has(Isa::Neon),
            (hw & HWCAP_ASIMD) && (hw & HWCAP_ASIMDDP) && (hw & HWCAP_FPHP) && (hw & HWCAP_ASIMDHP));
  EXPECT_FALSE(has(Isa::Avx2));
  EXPECT_FALSE(has(Isa::AvxVnni));
#endif
}

TEST(GemmDispatch, EmptyRangeWritesNothing) {
  std::mt19937 rng(6);
  Problem p = make_problem(DType::Q8_0, 64, 4, 2, 2, 2, rng, true);
  for (Isa isa : supported_isas()) expect_untouched_outside_range(p, p.run(isa), isa);
}

// ---- activation quantization -------------------------------------------------

class ActQuant : public ::testing::TestWithParam<DType> {};

// Bit-identical to the reference quantizer on every ISA.
TEST_P(ActQuant, EveryIsaIsBitIdenticalToReference) {
  const DType wt = GetParam();
  const DType at = act_type(wt);
  std::mt19937 rng(11);
  for (int64_t n : {256, 512, 4096, 8960}) {
    for (int variant = 0; variant < 5; ++variant) {
      std::vector<float> x = test::random_floats(n, rng, variant == 1 ? 1e-3f : 3.0f);
      if (variant == 2) {
        // Values that land exactly on .5 after scaling by 127 / amax = 1.
        for (int64_t i = 0; i < n; ++i)
          x[i] = static_cast<float>(static_cast<int>(i % 254) - 127) * 0.5f;
        for (int64_t i = 0; i < n; i += 32) x[i] = 127.0f;
      }
      if (variant == 3) std::fill(x.begin(), x.begin() + n / 2, 0.0f);  // zero blocks
      if (variant == 4) {
        for (int64_t i = 0; i < n; i += 7) x[i] = -x[i] * 40.0f;  // outliers of either sign
      }
      // The blocks, then (Q8_0 and Q8_1 activations) one int32 per block: the sum of its quants.
      const size_t blocks = at == DType::F32 ? static_cast<size_t>(n) * 4 : row_bytes(at, n);
      std::vector<uint8_t> want(act_row_bytes(wt, n));
      quantize_row(at, x.data(), want.data(), n);
      const size_t block_bytes = at == DType::Q8_1 ? sizeof(BlockQ8_1) : sizeof(BlockQ8_0);
      const size_t qs_at = at == DType::Q8_1 ? offsetof(BlockQ8_1, qs) : offsetof(BlockQ8_0, qs);
      if (at == DType::Q8_0 || at == DType::Q8_1) {
        for (int64_t b = 0; b < n / 32; ++b) {
          int32_t sum = 0;
          for (int j = 0; j < 32; ++j)
            sum += static_cast<int8_t>(want[static_cast<size_t>(b) * block_bytes + qs_at + static_cast<size_t>(j)]);
          std::memcpy(want.data() + blocks + static_cast<size_t>(b) * 4, &sum, 4);
        }
      }
      const bool sums = at == DType::Q8_0 || at == DType::Q8_1;
      ASSERT_EQ(want.size(), sums ? blocks + static_cast<size_t>(n / 32) * 4 : blocks);
      for (Isa isa : supported_isas()) {
        std::vector<uint8_t> got(want.size(), 0xee);
        quantize_activation(isa, wt, x.data(), got.data(), n);
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size()))
            << dtype_name(at) << " " << isa_name(isa) << " n=" << n << " variant=" << variant;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, ActQuant,
                         ::testing::Values(DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::F16),
                         [](const auto& tp) {
                           return std::string(dtype_name(act_type(tp.param)));
                         });

}  // namespace
}  // namespace edgelm::kernels
