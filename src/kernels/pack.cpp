// The interleaved weight layout (Layout::Interleave16): packing, and the
// scalar reference gemm over it that the SIMD kernels are tested against.
//
// A group of 16 rows is stored block by block. For block b of the group:
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
//   Q5_0 (352 bytes = 16 x 22; only NEON has a kernel for it):
//     d[16], qs[4][64]  as Q4_0 (the nibbles)
//     qh[4][16]    the fifth bits of rows 4k..4k+3 in qh[k], one byte per
//                  position of qs: byte 4i + j (row 4k + i) holds in bit c
//                  the bit of element 4c + j and in bit 4 + c that of
//                  element 16 + 4c + j, inverted (set where the value is
//                  the nibble minus 16), so that NEON turns one test per bit
//                  straight into the value's top four bits
//
// So one 64-byte chunk (after splitting nibbles for Q4_0 and Q5_0) holds four
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

namespace edgelm::kernels {

// pack_kquants.cpp: bytes of one super-block of a 16-row group (0 for a type
// it does not pack), packing of group g, read-back of row r, scalar gemm.
size_t kquant_group_sb_bytes(DType type);
void pack_kquant_group(DType type, const void* src, void* dst, int64_t cols, int64_t g);
void dequantize_kquant_packed_row(DType type, const void* packed, int64_t cols, int64_t r, float* dst);
void register_interleaved_kquants_scalar(Backend& be);

namespace {

constexpr size_t kQ4_0Group = 16 * sizeof(BlockQ4_0);  // bytes of one block of a 16-row group
constexpr size_t kQ8_0Group = 16 * sizeof(BlockQ8_0);
constexpr size_t kQ5_0Group = 16 * sizeof(BlockQ5_0);
constexpr size_t kQ5_0High = 32 + 4 * 64;  // where qh[4][16] starts in a packed block

// Row r's scale and nibble bytes of one block, where Q4_0 and Q5_0 keep them.
void put_nibbles(uint8_t* out, int r, const uint16_t& d, const uint8_t* qs) {
  std::memcpy(out + 2 * r, &d, 2);
  for (int c = 0; c < 4; ++c) std::memcpy(out + 32 + 64 * c + 4 * r, qs + 4 * c, 4);
}

void pack_q4_0(const BlockQ4_0* src, uint8_t* dst, int64_t nb, int64_t g) {
  uint8_t* out = dst + static_cast<size_t>(g) * 16 * static_cast<size_t>(nb) * sizeof(BlockQ4_0);
  for (int64_t b = 0; b < nb; ++b, out += kQ4_0Group) {
    for (int r = 0; r < 16; ++r) {
      const BlockQ4_0& blk = src[(g * 16 + r) * nb + b];
      put_nibbles(out, r, blk.d, blk.qs);
    }
  }
}

void pack_q8_0(const BlockQ8_0* src, uint8_t* dst, int64_t nb, int64_t g) {
  uint8_t* out = dst + static_cast<size_t>(g) * 16 * static_cast<size_t>(nb) * sizeof(BlockQ8_0);
  for (int64_t b = 0; b < nb; ++b, out += kQ8_0Group) {
    for (int r = 0; r < 16; ++r) {
      const BlockQ8_0& blk = src[(g * 16 + r) * nb + b];
      std::memcpy(out + 2 * r, &blk.d, 2);
      for (int c = 0; c < 8; ++c)
        for (int j = 0; j < 4; ++j)
          out[32 + 64 * c + 4 * r + j] = static_cast<uint8_t>(static_cast<uint8_t>(blk.qs[4 * c + j]) ^ kQ8_0PackedBias);
    }
  }
}

void pack_q5_0(const BlockQ5_0* src, uint8_t* dst, int64_t nb, int64_t g) {
  uint8_t* out = dst + static_cast<size_t>(g) * 16 * static_cast<size_t>(nb) * sizeof(BlockQ5_0);
  for (int64_t b = 0; b < nb; ++b, out += kQ5_0Group) {
    for (int r = 0; r < 16; ++r) {
      const BlockQ5_0& blk = src[(g * 16 + r) * nb + b];
      put_nibbles(out, r, blk.d, blk.qs);
      uint32_t h;
      std::memcpy(&h, blk.qh, 4);
      for (int j = 0; j < 4; ++j) {
        uint8_t byte = 0;
        for (int c = 0; c < 4; ++c) {
          byte |= static_cast<uint8_t>(((h >> (4 * c + j)) & 1u) << c);
          byte |= static_cast<uint8_t>(((h >> (16 + 4 * c + j)) & 1u) << (4 + c));
        }
        out[kQ5_0High + 16 * (r / 4) + 4 * (r % 4) + j] = static_cast<uint8_t>(~byte);
      }
    }
  }
}

// Quant e (0..31) of row r in a packed block, without the format's offset.
int q4_0_at(const uint8_t* blk, int r, int e) {
  const int c = (e % 16) / 4, j = e % 4;
  const uint8_t byte = blk[32 + 64 * c + 4 * r + j];
  return (e < 16 ? (byte & 15) : (byte >> 4)) - 8;
}
int q5_0_at(const uint8_t* blk, int r, int e) {
  const int c = (e % 16) / 4, j = e % 4;
  const uint8_t high = blk[kQ5_0High + 16 * (r / 4) + 4 * (r % 4) + j];
  const bool minus16 = ((high >> (e < 16 ? c : 4 + c)) & 1) != 0;
  return q4_0_at(blk, r, e) + 8 - (minus16 ? 16 : 0);
}
int q8_0_at(const uint8_t* blk, int r, int e) {
  return static_cast<int8_t>(blk[32 + 64 * (e / 4) + 4 * r + e % 4] ^ kQ8_0PackedBias);
}

// y = sum over blocks of d_w * d_x * (integer dot), as ggml's vec_dot does.
template <size_t kGroupBlock, int (*At)(const uint8_t*, int, int)>
void gemm_i16_scalar(const GemmArgs& a, int64_t r0, int64_t r1) {
  const int64_t nb = a.n / 32;
  const auto* w = static_cast<const uint8_t*>(a.w);
  for (int64_t g = r0 / 16; g < r1 / 16; ++g) {
    const uint8_t* gp = w + static_cast<size_t>(g) * 16 * a.w_stride;
    for (int64_t t = 0; t < a.n_tok; ++t) {
      const auto* x = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(a.x) + t * a.x_stride);
      for (int r = 0; r < 16; ++r) {
        float sum = 0;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* blk = gp + static_cast<size_t>(b) * kGroupBlock;
          uint16_t dw;
          std::memcpy(&dw, blk + 2 * r, 2);
          int isum = 0;
          for (int e = 0; e < 32; ++e) isum += At(blk, r, e) * x[b].qs[e];
          sum += static_cast<float>(isum) * (fp::half_to_float(dw) * fp::half_to_float(x[b].d));
        }
        a.y[t * a.ldy + g * 16 + r] = sum;
      }
    }
  }
}

}  // namespace

size_t packed_bytes(DType type, Layout layout, int64_t rows, int64_t cols) {
  // Q4_0, Q5_0 and Q8_0 keep their size; the K formats unpack their scales.
  const size_t sb = kquant_group_sb_bytes(type);
  if (layout == Layout::Rows || sb == 0) return row_bytes(type, cols) * static_cast<size_t>(rows);
  return static_cast<size_t>((rows + 15) / 16) * static_cast<size_t>(cols / kQK_K) * sb;
}

void pack_rows(DType type, Layout layout, const void* src, void* dst, int64_t cols, int64_t r0, int64_t r1) {
  if (layout != Layout::Interleave16 || r0 % 16 != 0 || r1 % 16 != 0 || cols % 32 != 0) std::abort();
  if (kquant_group_sb_bytes(type) != 0) {
    if (cols % kQK_K != 0) std::abort();
    for (int64_t g = r0 / 16; g < r1 / 16; ++g) pack_kquant_group(type, src, dst, cols, g);
    return;
  }
  const int64_t nb = cols / 32;
  for (int64_t g = r0 / 16; g < r1 / 16; ++g) {
    switch (type) {
      case DType::Q4_0: pack_q4_0(static_cast<const BlockQ4_0*>(src), static_cast<uint8_t*>(dst), nb, g); break;
      case DType::Q8_0: pack_q8_0(static_cast<const BlockQ8_0*>(src), static_cast<uint8_t*>(dst), nb, g); break;
      case DType::Q5_0: pack_q5_0(static_cast<const BlockQ5_0*>(src), static_cast<uint8_t*>(dst), nb, g); break;
      default: std::abort();  // preferred_layout never picks it
    }
  }
}

void dequantize_packed_row(DType type, Layout layout, const void* packed, int64_t cols, int64_t r, float* dst) {
  if (layout != Layout::Interleave16) std::abort();
  if (kquant_group_sb_bytes(type) != 0) {
    dequantize_kquant_packed_row(type, packed, cols, r, dst);
    return;
  }
  const int64_t nb = cols / 32;
  int (*at)(const uint8_t*, int, int) = nullptr;
  size_t block = 0;
  switch (type) {
    case DType::Q4_0: at = q4_0_at, block = kQ4_0Group; break;
    case DType::Q5_0: at = q5_0_at, block = kQ5_0Group; break;
    case DType::Q8_0: at = q8_0_at, block = kQ8_0Group; break;
    default: std::abort();
  }
  const auto* gp = static_cast<const uint8_t*>(packed) + static_cast<size_t>(r / 16) * static_cast<size_t>(nb) * block;
  const int row = static_cast<int>(r % 16);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = gp + static_cast<size_t>(b) * block;
    uint16_t dh;
    std::memcpy(&dh, blk + 2 * row, 2);
    const float d = fp::half_to_float(dh);
    for (int e = 0; e < 32; ++e)
      dst[b * 32 + e] = d * static_cast<float>(at(blk, row, e));
  }
}

void register_interleaved_scalar(Backend& be) {
  be.gemm_i16[static_cast<int>(DType::Q4_0)] = gemm_i16_scalar<kQ4_0Group, q4_0_at>;
  be.gemm_i16[static_cast<int>(DType::Q8_0)] = gemm_i16_scalar<kQ8_0Group, q8_0_at>;
  be.gemm_i16[static_cast<int>(DType::Q5_0)] = gemm_i16_scalar<kQ5_0Group, q5_0_at>;
  register_interleaved_kquants_scalar(be);
}

}  // namespace edgelm::kernels
