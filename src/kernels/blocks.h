// Quantization block layouts, byte for byte as GGUF (ggml) stores them.
//
// Every struct is a plain aggregate whose members need no padding, so
// sizeof(block) is the on-disk size; the static_asserts below pin it to the
// GGUF type table (tests/kernels/blocks_test.cpp also checks them against
// dtype_info()). Half-precision fields are raw IEEE binary16 bits; convert them
// with fp16_to_fp32(). All multi-byte fields are little-endian, which is the
// byte order of every CPU edgelm runs on.
//
// Naming follows the format: `d` is a block scale, `m`/`dmin` a block minimum
// (or its super-scale), `qs` the low bits of the quants, `qh` high bits.
#pragma once

#include <cstdint>

namespace edgelm::kernels {

constexpr int kQK = 32;           // elements per block of the legacy formats (Q4_0 ... Q8_1)
constexpr int kQK_K = 256;        // elements per super-block of the K formats
constexpr int kKScaleBytes = 12;  // packed 6-bit scales + mins of Q4_K / Q5_K

// x = d * (q - 8), q in [0, 15]. qs[j] holds element j in its low nibble and
// element j + 16 in its high nibble.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};

// x = d * q + m, q in [0, 15]; nibbles as Q4_0.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};

// x = d * (q - 16), q in [0, 31]. Low 4 bits as Q4_0; bit j of the
// little-endian u32 qh is bit 4 of element j.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};

// x = d * q + m, q in [0, 31]; bits as Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};

// x = d * q, q in [-127, 127] (weights and the activations of Q4_0/Q5_0/Q8_0).
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};

// What the interleaved layout (pack.cpp) adds to each Q8_0 quant, modulo 256:
// 128 on x86, where vpdpbusd takes the weight bytes unsigned; nothing on ARM,
// where sdot takes them signed as stored. The layout is built at load time
// and never written out, so it may differ between targets.
#if defined(__aarch64__)
inline constexpr uint8_t kQ8_0PackedBias = 0;
#else
inline constexpr uint8_t kQ8_0PackedBias = 0x80;
#endif

// Activations of Q4_1/Q5_1: x = d * q, and s = d * sum(q) (f16) so the
// weights' minimum m contributes m * s to a dot product.
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK];
};

// 16 sub-blocks of 16: x = d * (scales[j] & 15) * q - dmin * (scales[j] >> 4),
// q in [0, 3]. Quant of element 128*h + 32*k + l (h < 2, k < 4, l < 32) is bits
// 2k..2k+1 of qs[32*h + l]; it belongs to sub-block 8*h + 2*k + l/16.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};

// 16 sub-blocks of 16: x = d * (s_j - 32) * (q - (high bit ? 0 : 4)), with the
// low 2 bits of q placed as in Q2_K and the high bit of element 128*h + 32*k + l
// in bit 4*h + k of hmask[l]. The 6-bit s_j are packed in 12 bytes: the low
// nibble in scales[j % 8] (j < 8: low half, else high half), the top 2 bits in
// bits 2*(j/4)..+1 of scales[8 + j % 4].
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};

// 8 sub-blocks of 32: x = d * sc_j * q - dmin * m_j, q in [0, 15], with 6-bit
// sc_j / m_j packed in `scales` (see unpack_q4k_scales in kquant_scales.h).
// Element 64*i + l (l < 32) is the low nibble of qs[32*i + l]; element
// 64*i + 32 + l its high nibble.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};

// As Q4_K with a fifth bit: bit 4 of element 64*i + l is bit 2i of qh[l], of
// element 64*i + 32 + l bit 2i+1 of qh[l].
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};

// 16 sub-blocks of 16: x = d * scales[j] * (q - 32), q in [0, 63]. For each
// half h (128 elements) and l < 32, with ql = ql + 64h, qh = qh + 32h:
//   element 128h + l      : ql[l]      low nibble,  qh[l] bits 0-1
//   element 128h + 32 + l : ql[l + 32] low nibble,  qh[l] bits 2-3
//   element 128h + 64 + l : ql[l]      high nibble, qh[l] bits 4-5
//   element 128h + 96 + l : ql[l + 32] high nibble, qh[l] bits 6-7
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};

// Activations of the K formats (never stored in files): x = d * q, and
// bsums[j] = sum of qs[16j .. 16j+16), which lets a dot product apply the
// weights' per-sub-block minimums without touching the quants again.
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace edgelm::kernels
