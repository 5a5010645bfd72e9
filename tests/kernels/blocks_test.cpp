// Block layouts: sizes against the GGUF type table, and one block of every
// format built by hand from the layout description with its values worked
// out by hand (not by running the dequantizer).

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "kernels/kquant_scales.h"

namespace edgelm::kernels {
namespace {

TEST(Blocks, SizesMatchTheGgufTypeTable) {
  EXPECT_EQ(sizeof(BlockQ4_0), dtype_info(DType::Q4_0).type_size);
  EXPECT_EQ(sizeof(BlockQ4_1), dtype_info(DType::Q4_1).type_size);
  EXPECT_EQ(sizeof(BlockQ5_0), dtype_info(DType::Q5_0).type_size);
  EXPECT_EQ(sizeof(BlockQ5_1), dtype_info(DType::Q5_1).type_size);
  EXPECT_EQ(sizeof(BlockQ8_0), dtype_info(DType::Q8_0).type_size);
  EXPECT_EQ(sizeof(BlockQ8_1), dtype_info(DType::Q8_1).type_size);
  EXPECT_EQ(sizeof(BlockQ2_K), dtype_info(DType::Q2_K).type_size);
  EXPECT_EQ(sizeof(BlockQ3_K), dtype_info(DType::Q3_K).type_size);
  EXPECT_EQ(sizeof(BlockQ4_K), dtype_info(DType::Q4_K).type_size);
  EXPECT_EQ(sizeof(BlockQ5_K), dtype_info(DType::Q5_K).type_size);
  EXPECT_EQ(sizeof(BlockQ6_K), dtype_info(DType::Q6_K).type_size);
  EXPECT_EQ(sizeof(BlockQ8_K), dtype_info(DType::Q8_K).type_size);
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q8_1})
    EXPECT_EQ(dtype_info(t).block_size, static_cast<uint32_t>(kQK));
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K})
    EXPECT_EQ(dtype_info(t).block_size, static_cast<uint32_t>(kQK_K));
}

// The word-at-a-time unpacking the SIMD kernels use gives the bytes of the
// byte-at-a-time one, for any 12 bytes.
TEST(Blocks, ScaleWordsMatchTheBytewiseUnpacking) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int trial = 0; trial < 200; ++trial) {
    uint8_t p[12];
    for (auto& v : p) v = static_cast<uint8_t>(byte(rng));
    uint8_t sc[8], mn[8];
    unpack_q4k_scales(p, sc, mn);
    uint64_t sc_w, mn_w;
    unpack_q4k_scale_words(p, &sc_w, &mn_w);
    for (int j = 0; j < 8; ++j) {
      EXPECT_EQ((sc_w >> (8 * j)) & 0xff, sc[j]) << trial << " " << j;
      EXPECT_EQ((mn_w >> (8 * j)) & 0xff, mn[j]) << trial << " " << j;
    }
    int8_t s3[16];
    unpack_q3k_scales(p, s3);
    uint32_t w[4];
    unpack_q3k_biased_words(p, w);
    for (int j = 0; j < 16; ++j)
      EXPECT_EQ(static_cast<int>((w[j / 4] >> (8 * (j % 4))) & 0xff), s3[j] + 32)
          << trial << " " << j;
  }
}

template <class B>
std::vector<float> deq(DType t, const B& b) {
  const int64_t n = dtype_info(t).block_size;
  std::vector<float> v(static_cast<size_t>(n));
  dequantize_row(t, &b, v.data(), n);
  return v;
}

constexpr uint16_t kHalf0_125 = 0x3000, kHalf0_25 = 0x3400, kHalf0_5 = 0x3800, kHalf1 = 0x3c00,
                   kHalf2 = 0x4000, kHalfMinus1 = 0xbc00;

TEST(HandChecked, Q4_0) {
  BlockQ4_0 b{};
  b.d = kHalf0_5;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  auto v = deq(DType::Q4_0, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(v[j], (j - 8) * 0.5f) << j;       // low nibble: element j
    EXPECT_EQ(v[j + 16], (7 - j) * 0.5f) << j;  // high nibble: element j + 16
  }
}

TEST(HandChecked, Q4_1) {
  BlockQ4_1 b{};
  b.d = kHalf0_25;
  b.m = kHalfMinus1;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  auto v = deq(DType::Q4_1, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(v[j], j * 0.25f - 1.0f) << j;
    EXPECT_EQ(v[j + 16], (15 - j) * 0.25f - 1.0f) << j;
  }
}

TEST(HandChecked, Q5_0) {
  BlockQ5_0 b{};
  b.d = kHalf1;
  std::memset(b.qs, 0x21, 16);      // low nibble 1, high nibble 2
  const uint32_t qh = 0x80000001u;  // 5th bit of elements 0 and 31
  std::memcpy(b.qh, &qh, 4);
  auto v = deq(DType::Q5_0, b);
  EXPECT_EQ(v[0], 1.0f);  // 17 - 16
  for (int j = 1; j < 16; ++j) EXPECT_EQ(v[j], -15.0f) << j;
  for (int j = 16; j < 31; ++j) EXPECT_EQ(v[j], -14.0f) << j;
  EXPECT_EQ(v[31], 2.0f);  // 18 - 16
}

TEST(HandChecked, Q5_1) {
  BlockQ5_1 b{};
  b.d = kHalf0_5;
  b.m = kHalf2;
  std::memset(b.qs, 0x0f, 16);
  const uint32_t qh = 0xffff0000u;
  std::memcpy(b.qh, &qh, 4);
  auto v = deq(DType::Q5_1, b);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(v[j], 9.5f) << j;    // 15 * 0.5 + 2
  for (int j = 16; j < 32; ++j) EXPECT_EQ(v[j], 10.0f) << j;  // 16 * 0.5 + 2
}

TEST(HandChecked, Q8_0) {
  BlockQ8_0 b{};
  b.d = kHalf0_125;
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j - 16);
  auto v = deq(DType::Q8_0, b);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(v[j], (j - 16) / 8.0f) << j;
}

TEST(HandChecked, Q2_K) {
  BlockQ2_K b{};
  b.d = kHalf2;
  b.dmin = kHalf1;
  std::memset(b.scales, 0x31, 16);  // scale 1, min 3
  b.scales[5] = 0x72;               // scale 2, min 7
  b.scales[9] = 0x0f;               // scale 15, min 0
  b.qs[3] = 0xe4;                   // 2-bit fields 0, 1, 2, 3
  b.qs[52] = 0x40;                  // byte 32 + 20, field 3 = 1
  auto v = deq(DType::Q2_K, b);
  std::vector<float> want(256, -3.0f);  // 2 * 1 * 0 - 1 * 3
  for (int e = 80; e < 96; ++e) want[e] = -7.0f;
  for (int e = 144; e < 160; ++e) want[e] = 0.0f;
  want[35] = -1.0f;   // qs[3] field 1: element 32 + 3, q = 1: 2 - 3
  want[67] = 1.0f;    // field 2: element 64 + 3, q = 2: 4 - 3
  want[99] = 3.0f;    // field 3: element 96 + 3, q = 3: 6 - 3
  want[244] = -1.0f;  // qs[52] field 3: element 128 + 96 + 20, q = 1
  for (int e = 0; e < 256; ++e) EXPECT_EQ(v[e], want[e]) << e;
}

TEST(HandChecked, Q3_K) {
  BlockQ3_K b{};
  b.d = kHalf0_5;
  // Biased 6-bit scales: 33 (scale 1) everywhere but j=0: 37 (5), j=10: 63 (31),
  // j=13: 24 (-8). Low nibbles in bytes 0-7 (j >= 8 in the high half), top two
  // bits in bytes 8-11 at bit 2 * (j / 4).
  const uint8_t scales[12] = {0x15, 0x11, 0xf1, 0x11, 0x11, 0x81,
                              0x11, 0x11, 0xaa, 0x6a, 0xba, 0xaa};
  std::memcpy(b.scales, scales, 12);
  std::memset(b.qs, 0x55, 64);     // every low 2-bit field = 1
  std::memset(b.hmask, 0xff, 32);  // high bit set: value = low bits
  b.hmask[7] = 0xff & ~(1 << 5);   // element 128 + 32 + 7: 1 - 4 = -3
  b.qs[40] = 0x75;                 // byte 32 + 8, field 2 = 3: element 128 + 64 + 8
  auto v = deq(DType::Q3_K, b);
  std::vector<float> want(256, 0.5f);
  for (int e = 0; e < 16; ++e) want[e] = 2.5f;
  for (int e = 160; e < 176; ++e) want[e] = 15.5f;
  for (int e = 208; e < 224; ++e) want[e] = -4.0f;
  want[167] = 0.5f * 31 * -3;
  want[200] = 1.5f;
  for (int e = 0; e < 256; ++e) EXPECT_EQ(v[e], want[e]) << e;
}

// Scales {1, 2, 3, 63, 17, 33, 48, 5} and mins {0, 4, 8, 1, 20, 63, 2, 40}
// packed by hand.
constexpr uint8_t kQ4KScales[12] = {0x41, 0x82, 0xc3, 0x3f, 0x40, 0xc4,
                                    0x08, 0x81, 0x41, 0xf1, 0x20, 0x85};

TEST(HandChecked, Q4_K) {
  BlockQ4_K b{};
  b.d = kHalf1;
  b.dmin = kHalf0_5;
  std::memcpy(b.scales, kQ4KScales, 12);
  std::memset(b.qs, 0x21, 128);  // even sub-blocks q = 1, odd ones q = 2
  b.qs[70] = 0xf0;               // chunk 2, l = 6: element 134 q = 0, element 166 q = 15
  auto v = deq(DType::Q4_K, b);
  const float sub[8] = {1, 2, -1, 125.5f, 7, 34.5f, 47, -10};  // sc*q - 0.5*min
  for (int e = 0; e < 256; ++e) {
    const float want = e == 134 ? -10.0f : e == 166 ? 463.5f : sub[e / 32];
    EXPECT_EQ(v[e], want) << e;
  }
}

TEST(HandChecked, Q5_K) {
  BlockQ5_K b{};
  b.d = kHalf1;
  b.dmin = kHalf0_5;
  std::memcpy(b.scales, kQ4KScales, 12);
  std::memset(b.qs, 0x21, 128);
  b.qh[3] = 0x04;   // bit 2: element 64 + 3 gets 16 (q = 17)
  b.qh[31] = 0x80;  // bit 7: element 192 + 32 + 31 gets 16 (q = 18)
  auto v = deq(DType::Q5_K, b);
  const float sub[8] = {1, 2, -1, 125.5f, 7, 34.5f, 47, -10};
  for (int e = 0; e < 256; ++e) {
    const float want = e == 67 ? 47.0f : e == 255 ? 70.0f : sub[e / 32];
    EXPECT_EQ(v[e], want) << e;
  }
}

TEST(HandChecked, Q6_K) {
  BlockQ6_K b{};
  b.d = kHalf0_25;
  for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(j - 8);
  std::memset(b.ql, 0x11, 128);  // low 4 bits 1
  std::memset(b.qh, 0xaa, 64);   // high 2 bits 2: q = 33, value 1
  b.ql[64 + 32 + 5] = 0x1f;      // half 1, second quarter, l = 5: element 165 low bits 15
  b.qh[9] = 0xa8;                // half 0, l = 9, field 0 = 0: element 9, q = 1
  auto v = deq(DType::Q6_K, b);
  for (int e = 0; e < 256; ++e) {
    float want = 0.25f * static_cast<float>(e / 16 - 8);
    if (e == 165) want = 0.25f * 2 * 15;  // q = 47, scale 2
    if (e == 9) want = 0.25f * -8 * -31;  // q = 1, scale -8
    EXPECT_EQ(v[e], want) << e;
  }
}

TEST(HandChecked, Q8_0Quantize) {
  // x = -16 .. 15 halves: amax 8, d = 8/127.
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = (j - 16) * 0.5f;
  BlockQ8_0 b;
  quantize_row(DType::Q8_0, x, &b, 32);
  EXPECT_EQ(b.d, fp32_to_fp16(8.0f / 127.0f));
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[16], 0);
  EXPECT_EQ(b.qs[17], 8);    // 0.5 * 127 / 8 = 7.94
  EXPECT_EQ(b.qs[31], 119);  // 7.5 * 127 / 8 = 119.06
}

TEST(HandChecked, Q8_0QuantizeRoundsHalfAwayFromZero) {
  // amax 127 -> d = 1, id = 1: quants are roundf(x).
  float x[32] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.5f, -1.4f};
  BlockQ8_0 b;
  quantize_row(DType::Q8_0, x, &b, 32);
  EXPECT_EQ(b.d, kHalf1);
  EXPECT_EQ(b.qs[1], 3);
  EXPECT_EQ(b.qs[2], -3);
  EXPECT_EQ(b.qs[3], 1);
  EXPECT_EQ(b.qs[4], -1);
  EXPECT_EQ(b.qs[5], 2);
  EXPECT_EQ(b.qs[6], -1);
}

TEST(HandChecked, Q8_1Quantize) {
  float x[32] = {};
  x[0] = 127.0f;
  x[1] = -27.0f;
  x[31] = 10.0f;
  BlockQ8_1 b;
  quantize_row(DType::Q8_1, x, &b, 32);
  EXPECT_EQ(b.d, kHalf1);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], -27);
  EXPECT_EQ(b.qs[31], 10);
  EXPECT_EQ(fp16_to_fp32(b.s), 110.0f);  // d * (127 - 27 + 10)
}

TEST(HandChecked, Q8_KQuantize) {
  // x = e - 128: the largest magnitude is x[0] = -128, so iscale = 127/128.
  std::vector<float> x(256);
  for (int e = 0; e < 256; ++e) x[e] = static_cast<float>(e - 128);
  BlockQ8_K b;
  quantize_row(DType::Q8_K, x.data(), &b, 256);
  EXPECT_EQ(b.d, 1.0f / (127.0f / 128.0f));
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[128], 0);
  EXPECT_EQ(b.qs[255], 126);  // 127 * 127/128 = 126.0078
  EXPECT_EQ(b.qs[192], 64);   // 64 * 127/128 = 63.5 -> ties to even: 64
  EXPECT_EQ(b.qs[64], -64);   // -63.5 -> -64
  EXPECT_EQ(b.qs[66], -62);   // -62 * 127/128 = -61.52 -> -62
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int l = 0; l < 16; ++l) sum += b.qs[16 * g + l];
    EXPECT_EQ(b.bsums[g], sum) << g;
  }
  // An all-zero block quantizes to all zeros, sums included.
  std::vector<float> z(256, 0.0f);
  quantize_row(DType::Q8_K, z.data(), &b, 256);
  EXPECT_EQ(b.d, 0.0f);
  for (int g = 0; g < 16; ++g) EXPECT_EQ(b.bsums[g], 0);
}

// A dot product worked out by hand: one Q4_0 block against one Q8_0 block.
TEST(HandChecked, GemmQ4_0TimesQ8_0) {
  BlockQ4_0 w{};
  w.d = kHalf0_5;
  std::memset(w.qs, 0x99, 16);  // every quant 9: value (9 - 8) * 0.5 = 0.5
  BlockQ8_0 x{};
  x.d = kHalf0_25;
  for (int j = 0; j < 32; ++j) x.qs[j] = static_cast<int8_t>(j);  // sum 496
  float y = 0.0f;
  GemmArgs a{DType::Q4_0, &w, sizeof w, 32, &x, sizeof x, 1, &y, 1};
  for (Isa isa : supported_isas()) {
    y = 0.0f;
    gemm(isa, a, 0, 1);
    EXPECT_EQ(y, 496 * 0.5f * 0.25f) << isa_name(isa);
  }
}

}  // namespace
}  // namespace edgelm::kernels
