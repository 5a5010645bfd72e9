// The interleaved weight layout (Layout::Interleave16): packing, and the
// scalar reference gemm over it that the SIMD kernels are tested against.
//
// A group of 16 rows is stored block by block. The 4- and 5-bit formats
// store the groups in pairs: block b of pair p is group 2p's block b
// followed by group 2p + 1's (a matrix of an odd number of groups ends with
// a lone group whose partner's places are padding), so a group's blocks are
// two block sizes apart (interleaved_driver.h's GroupBlocks: a pair's
// blocks are whole cache lines, and decode reads both groups in one
// stream); Q8_0's groups follow one another. For block b of a group:
//
//   Q4_0 (288 bytes = 16 x 18):
//     d[16]        the 16 rows' f16 scales
//     qs[4][64]    chunk c, byte 4r + j = byte 4c + j of row r's block, which
//                  holds element 4c + j (low nibble) and 16 + 4c + j (high)
//   Q8_0 (544 bytes = 16 x 34):
//     d[16]        the 16 rows' f16 scales
//     qs[8][64]    chunk c, byte 4r + j = quant 4c + j of row r, plus
//                  kQ8_0PackedBias (blocks.h): on x86 128, an unsigned byte
//                  as vpdpbusd wants; on ARM the signed quant as stored
//   Q5_0 (352 bytes = 16 x 22):
//     d[16], qs[4][64]  as Q4_0 (the nibbles)
//     qh[4][16]    the fifth bits of rows 4k..4k+3 in qh[k], one byte per
//                  position of qs: byte 4i + j (row 4k + i) holds in bit c
//                  the bit of element 4c + j and in bit 4 + c that of
//                  element 16 + 4c + j, inverted (set where the value is
//                  the nibble minus 16), so that NEON turns one test per bit
//                  straight into the value's top four bits
//   Q4_1 (320 bytes = 16 x 20):
//     d[16], m[16] the 16 rows' f16 scales and minimums
//     qs[4][64]    as Q4_0's
//   Q5_1 (384 bytes = 16 x 24):
//     d[16], m[16], qs[4][64] as Q4_1's
//     qh[4][16]    as Q5_0's
//
// So one 64-byte chunk (after splitting nibbles, all but Q8_0) holds four
// consecutive elements of each of the 16 rows: vpdpbusd against the same four
// activation bytes broadcast to every lane gives 16 rows' partial sums at once.
// NEON reads the same chunk as four 16-byte vectors, rows 4k..4k+3 each: one
// sdot by lane against four activation bytes gives four rows' partial sums
// (interleaved_neon.cpp).
//
// The K formats (Q4_K, Q5_K, Q6_K) are packed per super-block of 256 in
// pack_kquants.cpp; this file dispatches to it.
#include <cstdlib>
#include <cstring>

#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/fp16.h"
#include "kernels/interleaved_driver.h"

namespace edgelm::kernels {

// pack_kquants.cpp: bytes of one super-block of a 16-row group (0 for a type
// it does not pack), packing of group g, read-back of row r, scalar gemm.
size_t kquant_group_sb_bytes(DType type);
void pack_kquant_group(DType type, const void* src, void* dst, int64_t cols, int64_t g);
void dequantize_kquant_packed_row(DType type, const void* packed, int64_t cols, int64_t r, float* dst);
void register_interleaved_kquants_scalar(Backend& be);

namespace {

// Bytes of one block of a 16-row group; where the quants (qs), the fifth
// bits (high) and the minimums (mins) start in it: the layouts the kernels
// read (interleaved_driver.h).
// step: from one block of a group to its next (GroupBlocks::kStep).
struct Packed32 {
  size_t bytes, qs, high, mins, step;
};

// Where block 0 of group g starts in a matrix of nb blocks per row (in
// pairs, the groups above, when step is two blocks).
size_t group_offset(const Packed32& p, int64_t nb, int64_t g) {
  const size_t group_bytes = static_cast<size_t>(nb) * p.bytes;
  if (p.step == p.bytes) return Groups<false>{group_bytes}.offset(g);
  return Groups<true>{group_bytes, p.bytes}.offset(g);
}
template <class L>
constexpr Packed32 packed32(size_t qs, size_t high, size_t mins) {
  return {L::kBlock, qs, high, mins, L::kStep};
}
constexpr Packed32 kQ4_0P = packed32<Q4_0Layout>(Q4_0Layout::kQuants, 0, 0);
constexpr Packed32 kQ5_0P = packed32<Q5_0Layout>(Q5_0Layout::kQuants, Q5_0Layout::kHigh, 0);
constexpr Packed32 kQ8_0P = packed32<Q8_0Layout>(Q8_0Layout::kQuants, 0, 0);
constexpr Packed32 kQ4_1P = packed32<Q4_1Layout>(Q4_1Layout::kQuants, 0, Q4_1Layout::kMinsAt);
constexpr Packed32 kQ5_1P =
    packed32<Q5_1Layout>(Q5_1Layout::kQuants, Q5_1Layout::kHigh, Q5_1Layout::kMinsAt);

// Whether type's groups go in pairs (GroupBlocks::kPaired).
bool paired_groups(DType type) {
  switch (type) {
    case DType::Q4_0:
      return Q4_0Layout::kPaired;
    case DType::Q5_0:
      return Q5_0Layout::kPaired;
    case DType::Q4_1:
      return Q4_1Layout::kPaired;
    case DType::Q5_1:
      return Q5_1Layout::kPaired;
    case DType::Q8_0:
      return Q8_0Layout::kPaired;
    default:
      return false;
  }
}

// Row r's scale and nibble bytes of one block.
void put_nibbles(uint8_t* out, const Packed32& p, int r, const uint16_t& d, const uint8_t* qs) {
  std::memcpy(out + 2 * r, &d, 2);
  for (int c = 0; c < 4; ++c) std::memcpy(out + p.qs + 64 * c + 4 * r, qs + 4 * c, 4);
}

// Row r's fifth bits (the format's qh) at p.high, inverted and regrouped
// for NEON's byte tests (see the layout above).
void put_fifth_bits(uint8_t* out, const Packed32& p, int r, const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  for (int j = 0; j < 4; ++j) {
    uint8_t byte = 0;
    for (int c = 0; c < 4; ++c) {
      byte |= static_cast<uint8_t>(((h >> (4 * c + j)) & 1u) << c);
      byte |= static_cast<uint8_t>(((h >> (16 + 4 * c + j)) & 1u) << (4 + c));
    }
    out[p.high + 16 * (r / 4) + 4 * (r % 4) + j] = static_cast<uint8_t>(~byte);
  }
}

// Group g of a matrix of nb blocks per row, block by block.
template <class WB, class Put>
void pack_group(const Packed32& p, const void* src, void* dst, int64_t nb, int64_t g, Put put) {
  const auto* rows = static_cast<const WB*>(src);
  uint8_t* out = static_cast<uint8_t*>(dst) + group_offset(p, nb, g);
  for (int64_t b = 0; b < nb; ++b, out += p.step)
    for (int r = 0; r < 16; ++r) put(out, r, rows[(g * 16 + r) * nb + b]);
}

void pack_32(DType type, const void* src, void* dst, int64_t nb, int64_t g) {
  switch (type) {
    case DType::Q4_0:
      pack_group<BlockQ4_0>(kQ4_0P, src, dst, nb, g, [](uint8_t* out, int r, const BlockQ4_0& blk) {
        put_nibbles(out, kQ4_0P, r, blk.d, blk.qs);
      });
      break;
    case DType::Q5_0:
      pack_group<BlockQ5_0>(kQ5_0P, src, dst, nb, g, [](uint8_t* out, int r, const BlockQ5_0& blk) {
        put_nibbles(out, kQ5_0P, r, blk.d, blk.qs);
        put_fifth_bits(out, kQ5_0P, r, blk.qh);
      });
      break;
    case DType::Q4_1:
      pack_group<BlockQ4_1>(kQ4_1P, src, dst, nb, g, [](uint8_t* out, int r, const BlockQ4_1& blk) {
        put_nibbles(out, kQ4_1P, r, blk.d, blk.qs);
        std::memcpy(out + kQ4_1P.mins + 2 * r, &blk.m, 2);
      });
      break;
    case DType::Q5_1:
      pack_group<BlockQ5_1>(kQ5_1P, src, dst, nb, g, [](uint8_t* out, int r, const BlockQ5_1& blk) {
        put_nibbles(out, kQ5_1P, r, blk.d, blk.qs);
        std::memcpy(out + kQ5_1P.mins + 2 * r, &blk.m, 2);
        put_fifth_bits(out, kQ5_1P, r, blk.qh);
      });
      break;
    case DType::Q8_0:
      pack_group<BlockQ8_0>(kQ8_0P, src, dst, nb, g, [](uint8_t* out, int r, const BlockQ8_0& blk) {
        std::memcpy(out + 2 * r, &blk.d, 2);
        for (int c = 0; c < 8; ++c)
          for (int j = 0; j < 4; ++j)
            out[kQ8_0P.qs + 64 * c + 4 * r + j] =
                static_cast<uint8_t>(static_cast<uint8_t>(blk.qs[4 * c + j]) ^ kQ8_0PackedBias);
      });
      break;
    default:
      std::abort();  // preferred_layout never picks it
  }
}

// Row r's nibble and fifth bit of element e (0..31) in a packed block.
int nibble(const uint8_t* blk, const Packed32& p, int r, int e) {
  const uint8_t byte = blk[p.qs + 64 * ((e % 16) / 4) + 4 * r + e % 4];
  return e < 16 ? (byte & 15) : (byte >> 4);
}
int fifth_bit(const uint8_t* blk, const Packed32& p, int r, int e) {
  const uint8_t high = blk[p.high + 16 * (r / 4) + 4 * (r % 4) + e % 4];
  return ((high >> ((e < 16 ? 0 : 4) + (e % 16) / 4)) & 1) != 0 ? 0 : 1;  // stored inverted
}

// Each format's packed reading: q(blk, r, e) is row r's value e without the
// scale (Q4_0 q - 8, Q5_0 q - 16, Q4_1/Q5_1 q, Q8_0 q); kMins: x = d q + m,
// with m at kP.mins + 2r; XB the activation block.
struct Q4_0R {
  using XB = BlockQ8_0;
  static constexpr Packed32 kP = kQ4_0P;
  static constexpr bool kMins = false;
  static int q(const uint8_t* blk, int r, int e) { return nibble(blk, kP, r, e) - 8; }
};
struct Q5_0R {
  using XB = BlockQ8_0;
  static constexpr Packed32 kP = kQ5_0P;
  static constexpr bool kMins = false;
  static int q(const uint8_t* blk, int r, int e) { return nibble(blk, kP, r, e) + 16 * fifth_bit(blk, kP, r, e) - 16; }
};
struct Q8_0R {
  using XB = BlockQ8_0;
  static constexpr Packed32 kP = kQ8_0P;
  static constexpr bool kMins = false;
  static int q(const uint8_t* blk, int r, int e) {
    return static_cast<int8_t>(blk[kP.qs + 64 * (e / 4) + 4 * r + e % 4] ^ kQ8_0PackedBias);
  }
};
struct Q4_1R {
  using XB = BlockQ8_1;
  static constexpr Packed32 kP = kQ4_1P;
  static constexpr bool kMins = true;
  static int q(const uint8_t* blk, int r, int e) { return nibble(blk, kP, r, e); }
};
struct Q5_1R {
  using XB = BlockQ8_1;
  static constexpr Packed32 kP = kQ5_1P;
  static constexpr bool kMins = true;
  static int q(const uint8_t* blk, int r, int e) { return nibble(blk, kP, r, e) + 16 * fifth_bit(blk, kP, r, e); }
};

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp::half_to_float(h);
}

// y = sum over blocks of d_w * d_x * (integer dot) [+ m_w * s_x], as ggml's
// vec_dot does.
template <class R>
void gemm_i16_scalar(const GemmArgs& a, int64_t r0, int64_t r1) {
  const int64_t nb = a.n / 32;
  const auto* w = static_cast<const uint8_t*>(a.w);
  for (int64_t g = r0 / 16; g < r1 / 16; ++g) {
    const uint8_t* gp = w + group_offset(R::kP, nb, g);
    for (int64_t t = 0; t < a.n_tok; ++t) {
      const auto* x = reinterpret_cast<const typename R::XB*>(static_cast<const uint8_t*>(a.x) + t * a.x_stride);
      for (int r = 0; r < 16; ++r) {
        float sum = 0;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* blk = gp + static_cast<size_t>(b) * R::kP.step;
          int isum = 0;
          for (int e = 0; e < 32; ++e) isum += R::q(blk, r, e) * x[b].qs[e];
          sum += static_cast<float>(isum) * (half_at(blk + 2 * r) * fp::half_to_float(x[b].d));
          if constexpr (R::kMins) sum += half_at(blk + R::kP.mins + 2 * r) * fp::half_to_float(x[b].s);
        }
        a.y[t * a.ldy + g * 16 + r] = sum;
      }
    }
  }
}

template <class R>
void dequantize_row_32(const void* packed, int64_t cols, int64_t r, float* dst) {
  const int64_t nb = cols / 32;
  const uint8_t* gp = static_cast<const uint8_t*>(packed) + group_offset(R::kP, nb, r / 16);
  const int row = static_cast<int>(r % 16);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = gp + static_cast<size_t>(b) * R::kP.step;
    const float d = half_at(blk + 2 * row);
    const float m = R::kMins ? half_at(blk + R::kP.mins + 2 * row) : 0.0f;
    for (int e = 0; e < 32; ++e) {
      const float v = d * static_cast<float>(R::q(blk, row, e));
      dst[b * 32 + e] = R::kMins ? v + m : v;
    }
  }
}

}  // namespace

size_t packed_bytes(DType type, Layout layout, int64_t rows, int64_t cols) {
  // The 32-element formats keep their size, but for the padding of a lone
  // last group where groups go in pairs; the K formats unpack their scales.
  const size_t sb = kquant_group_sb_bytes(type);
  if (layout == Layout::Rows) return row_bytes(type, cols) * static_cast<size_t>(rows);
  if (sb == 0) {
    const int64_t unit = paired_groups(type) ? 32 : 1;
    return row_bytes(type, cols) * static_cast<size_t>((rows + unit - 1) / unit * unit);
  }
  return static_cast<size_t>((rows + 15) / 16) * static_cast<size_t>(cols / kQK_K) * sb;
}

void pack_rows(DType type, Layout layout, const void* src, void* dst, int64_t cols, int64_t r0, int64_t r1) {
  if (layout != Layout::Interleave16 || r0 % 16 != 0 || r1 % 16 != 0 || cols % 32 != 0) std::abort();
  if (kquant_group_sb_bytes(type) != 0) {
    if (cols % kQK_K != 0) std::abort();
    for (int64_t g = r0 / 16; g < r1 / 16; ++g) pack_kquant_group(type, src, dst, cols, g);
    return;
  }
  for (int64_t g = r0 / 16; g < r1 / 16; ++g) pack_32(type, src, dst, cols / 32, g);
}

void dequantize_packed_row(DType type, Layout layout, const void* packed, int64_t cols, int64_t r, float* dst) {
  if (layout != Layout::Interleave16) std::abort();
  if (kquant_group_sb_bytes(type) != 0) {
    dequantize_kquant_packed_row(type, packed, cols, r, dst);
    return;
  }
  switch (type) {
    case DType::Q4_0: return dequantize_row_32<Q4_0R>(packed, cols, r, dst);
    case DType::Q5_0: return dequantize_row_32<Q5_0R>(packed, cols, r, dst);
    case DType::Q8_0: return dequantize_row_32<Q8_0R>(packed, cols, r, dst);
    case DType::Q4_1: return dequantize_row_32<Q4_1R>(packed, cols, r, dst);
    case DType::Q5_1: return dequantize_row_32<Q5_1R>(packed, cols, r, dst);
    default: std::abort();
  }
}

void register_interleaved_scalar(Backend& be) {
  be.gemm_i16[static_cast<int>(DType::Q4_0)] = gemm_i16_scalar<Q4_0R>;
  be.gemm_i16[static_cast<int>(DType::Q8_0)] = gemm_i16_scalar<Q8_0R>;
  be.gemm_i16[static_cast<int>(DType::Q5_0)] = gemm_i16_scalar<Q5_0R>;
  be.gemm_i16[static_cast<int>(DType::Q4_1)] = gemm_i16_scalar<Q4_1R>;
  be.gemm_i16[static_cast<int>(DType::Q5_1)] = gemm_i16_scalar<Q5_1R>;
  register_interleaved_kquants_scalar(be);
}

}  // namespace edgelm::kernels
