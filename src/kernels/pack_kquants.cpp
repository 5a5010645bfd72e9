// The interleaved layout (Layout::Interleave16) of the K formats Q4_K, Q5_K
// and Q6_K: packing, row read-back, and the scalar reference gemm that the
// SIMD kernels (interleaved_kquants_avx512.cpp, interleaved_ymm.h,
// interleaved_kquants_neon.cpp) are tested against.
//
// A group of 16 rows is stored super-block (256 elements) by super-block.
// The 6-bit scales and minimums are unpacked to one byte per row and
// sub-block, so a kernel gets the 16 rows' values of one sub-block with a
// 16-byte load; the quants are interleaved as in Q4_0 (pack.cpp): one
// 64-byte vector holds four consecutive elements of each of the 16 rows,
// byte 4r + k for row r. Byte offsets within one super-block of a group:
//
//   Q4_K, 2368 bytes (16 x 144 + 64: the unpacked scales cost 2.8%):
//     0     d[16]          f16 super-scales of the 16 rows
//     32    dmin[16]       f16
//     64    sc[8][16]      sc[j][r] = scale of sub-block j (32 elements) of row r
//     192   mn[8][16]      minimums likewise
//     320   qs[8][4][64]   sub-block j, chunk c, byte 4r + k: element
//                          32j + 4c + k in the low nibble, 32j + 16 + 4c + k
//                          in the high nibble (a sub-block is 4 loads)
//   Q5_K, 2880 bytes (16 x 176 + 64): as Q4_K up to 320, then per sub-block j
//     320 + 320j   qs[4][64]  as Q4_K
//     + 256        qh[64]     byte 4r + k: bit c is bit 4 of element
//                             32j + 4c + k, bit 4 + c of 32j + 16 + 4c + k
//   Q6_K, 3360 bytes (16 x 210: no growth):
//     0     d[16]          f16
//     32    sc[16][16]     int8, sc[j][r] for sub-block j (16 elements)
//     288 + 192j           sub-block j:
//       [0..64)    byte 4r + k: low 4 bits of element 16j + k (low nibble)
//                  and of 16j + 8 + k (high nibble)
//       [64..128)  the same for 16j + 4 + k and 16j + 12 + k
//       [128..192) byte 4r + k: bits 2c, 2c + 1 = top 2 bits of 16j + 4c + k
//
// Quants stay unsigned (Q6_K's offset 32 is removed through the activation's
// block sums, as ggml does), so they feed vpdpbusd directly.
#include <cstdlib>
#include <cstring>

#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/fp16.h"
#include "kernels/kquant_scales.h"

namespace edgelm::kernels {
namespace {

// Per format: bytes of one super-block of a 16-row group, and where element
// e of row r lives. get() returns the stored quant (unsigned, offset kept).
// The low nibbles of Q4_K and Q5_K: sub-block j starts kStride * j bytes
// after the scales and minimums.
template <size_t kStride>
struct KNibbles {
  static constexpr size_t kScales = 64, kMins = 192, kQuants = 320;
  static size_t nib_byte(int r, int e) {
    const int j = e / 32, i = e % 32;
    return kQuants + kStride * static_cast<size_t>(j) + 64 * static_cast<size_t>((i % 16) / 4) + 4 * r + i % 4;
  }
  static int get_lo(const uint8_t* sb, int r, int e) { return (sb[nib_byte(r, e)] >> (4 * ((e % 32) / 16))) & 15; }
  static void put_lo(uint8_t* sb, int r, int e, int q) {
    sb[nib_byte(r, e)] = static_cast<uint8_t>(sb[nib_byte(r, e)] | (q & 15) << (4 * ((e % 32) / 16)));
  }
};

struct Q4KPacked : KNibbles<256> {
  static constexpr size_t kBytes = 2368;
  static int get(const uint8_t* sb, int r, int e) { return get_lo(sb, r, e); }
  static void put(uint8_t* sb, int r, int e, int q) { put_lo(sb, r, e, q); }
};

struct Q5KPacked : KNibbles<320> {
  static constexpr size_t kBytes = 2880;
  static size_t hi_byte(int r, int e) { return kQuants + 320 * static_cast<size_t>(e / 32) + 256 + 4 * r + e % 4; }
  static int hi_bit(int e) { return 4 * ((e % 32) / 16) + (e % 16) / 4; }
  static int get(const uint8_t* sb, int r, int e) { return get_lo(sb, r, e) | ((sb[hi_byte(r, e)] >> hi_bit(e)) & 1) << 4; }
  static void put(uint8_t* sb, int r, int e, int q) {
    put_lo(sb, r, e, q);
    sb[hi_byte(r, e)] = static_cast<uint8_t>(sb[hi_byte(r, e)] | ((q >> 4) & 1) << hi_bit(e));
  }
};

struct Q6KPacked {
  static constexpr size_t kBytes = 3360;
  static constexpr size_t kScales = 32, kQuants = 288;
  // Element i (< 16) of a sub-block is chunk c = i / 4: chunks 0 and 2 share
  // the first nibble vector, 1 and 3 the second.
  static size_t nib_byte(int r, int e) {
    const int j = e / 16, c = (e % 16) / 4;
    return kQuants + 192 * static_cast<size_t>(j) + 64 * static_cast<size_t>(c % 2) + 4 * r + e % 4;
  }
  static size_t hi_byte(int r, int e) { return kQuants + 192 * static_cast<size_t>(e / 16) + 128 + 4 * r + e % 4; }
  static int get(const uint8_t* sb, int r, int e) {
    const int c = (e % 16) / 4;
    const int lo = (sb[nib_byte(r, e)] >> (4 * (c / 2))) & 15;
    return lo | ((sb[hi_byte(r, e)] >> (2 * c)) & 3) << 4;
  }
  static void put(uint8_t* sb, int r, int e, int q) {
    const int c = (e % 16) / 4;
    sb[nib_byte(r, e)] = static_cast<uint8_t>(sb[nib_byte(r, e)] | (q & 15) << (4 * (c / 2)));
    sb[hi_byte(r, e)] = static_cast<uint8_t>(sb[hi_byte(r, e)] | ((q >> 4) & 3) << (2 * c));
  }
};

// The 256 stored quants of one file block, in element order.
void unpack_q4_k(const BlockQ4_K& b, uint8_t* q) {
  for (int i = 0; i < 4; ++i)
    for (int l = 0; l < 32; ++l) {
      q[64 * i + l] = b.qs[32 * i + l] & 15;
      q[64 * i + 32 + l] = static_cast<uint8_t>(b.qs[32 * i + l] >> 4);
    }
}
void unpack_q5_k(const BlockQ5_K& b, uint8_t* q) {
  for (int i = 0; i < 4; ++i)
    for (int l = 0; l < 32; ++l) {
      q[64 * i + l] = static_cast<uint8_t>((b.qs[32 * i + l] & 15) | ((b.qh[l] >> (2 * i)) & 1) << 4);
      q[64 * i + 32 + l] = static_cast<uint8_t>((b.qs[32 * i + l] >> 4) | ((b.qh[l] >> (2 * i + 1)) & 1) << 4);
    }
}
void unpack_q6_k(const BlockQ6_K& b, uint8_t* q) {
  for (int e = 0; e < kQK_K; ++e) {
    const int h = e / 128, k = (e / 32) % 4, l = e % 32;
    const uint8_t ql = b.ql[64 * h + 32 * (k % 2) + l];
    const uint8_t qh = b.qh[32 * h + l];
    q[e] = static_cast<uint8_t>(((ql >> (4 * (k / 2))) & 15) | ((qh >> (2 * k)) & 3) << 4);
  }
}

template <class P, class WB, void (*Unpack)(const WB&, uint8_t*)>
void pack_q45k_group(const WB* src, uint8_t* gp, int64_t nb, int64_t g) {
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* sb = gp + static_cast<size_t>(b) * P::kBytes;
    std::memset(sb, 0, P::kBytes);
    for (int r = 0; r < 16; ++r) {
      const WB& blk = src[(g * 16 + r) * nb + b];
      std::memcpy(sb + 2 * r, &blk.d, 2);
      std::memcpy(sb + 32 + 2 * r, &blk.dmin, 2);
      uint8_t sc[8], mn[8], q[kQK_K];
      unpack_q4k_scales(blk.scales, sc, mn);
      for (int j = 0; j < 8; ++j) {
        sb[P::kScales + 16 * j + r] = sc[j];
        sb[P::kMins + 16 * j + r] = mn[j];
      }
      Unpack(blk, q);
      for (int e = 0; e < kQK_K; ++e) P::put(sb, r, e, q[e]);
    }
  }
}

void pack_q6_k_group(const BlockQ6_K* src, uint8_t* gp, int64_t nb, int64_t g) {
  using P = Q6KPacked;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* sb = gp + static_cast<size_t>(b) * P::kBytes;
    std::memset(sb, 0, P::kBytes);
    for (int r = 0; r < 16; ++r) {
      const BlockQ6_K& blk = src[(g * 16 + r) * nb + b];
      std::memcpy(sb + 2 * r, &blk.d, 2);
      for (int j = 0; j < 16; ++j) sb[P::kScales + 16 * j + r] = static_cast<uint8_t>(blk.scales[j]);
      uint8_t q[kQK_K];
      unpack_q6_k(blk, q);
      for (int e = 0; e < kQK_K; ++e) P::put(sb, r, e, q[e]);
    }
  }
}

float f16_at(const uint8_t* p, int r) {
  uint16_t h;
  std::memcpy(&h, p + 2 * r, 2);
  return fp::half_to_float(h);
}

// Row r of one packed super-block, with the formulas (and the order of float
// operations) of dequantize_row, so read-back is bit-exact.
template <class P>
void dequantize_q45k_sb(const uint8_t* sb, int r, float* y) {
  const float d = f16_at(sb, r), dmin = f16_at(sb + 32, r);
  for (int j = 0; j < 8; ++j) {
    const float dl = d * static_cast<float>(sb[P::kScales + 16 * j + r]);
    const float ml = dmin * static_cast<float>(sb[P::kMins + 16 * j + r]);
    for (int l = 0; l < 32; ++l) y[32 * j + l] = dl * static_cast<float>(P::get(sb, r, 32 * j + l)) - ml;
  }
}

void dequantize_q6k_sb(const uint8_t* sb, int r, float* y) {
  using P = Q6KPacked;
  const float d = f16_at(sb, r);
  for (int e = 0; e < kQK_K; ++e) {
    const auto sc = static_cast<int8_t>(sb[P::kScales + 16 * (e / 16) + r]);
    y[e] = d * static_cast<float>(sc) * static_cast<float>(P::get(sb, r, e) - 32);
  }
}

// The row-layout reference's integer math (gemm_scalar.cpp, ggml's vec_dot):
// per super-block isum = sum_j scale_j * dot(q, x) over sub-block j, minus
// for Q4_K/Q5_K dmin * sum_j min_j * (sum of x over sub-block j).
template <class P>
float dot_q45k_sb(const uint8_t* sb, int r, const BlockQ8_K& x) {
  int isum = 0, summs = 0;
  for (int j = 0; j < 8; ++j) {
    int sub = 0;
    for (int l = 0; l < 32; ++l) sub += P::get(sb, r, 32 * j + l) * x.qs[32 * j + l];
    isum += sb[P::kScales + 16 * j + r] * sub;
    summs += sb[P::kMins + 16 * j + r] * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
  }
  return x.d * f16_at(sb, r) * static_cast<float>(isum) - x.d * f16_at(sb + 32, r) * static_cast<float>(summs);
}

float dot_q6k_sb(const uint8_t* sb, int r, const BlockQ8_K& x) {
  using P = Q6KPacked;
  int isum = 0;
  for (int j = 0; j < 16; ++j) {
    int sub = 0;
    for (int l = 0; l < 16; ++l) sub += (P::get(sb, r, 16 * j + l) - 32) * x.qs[16 * j + l];
    isum += static_cast<int8_t>(sb[P::kScales + 16 * j + r]) * sub;
  }
  return x.d * f16_at(sb, r) * static_cast<float>(isum);
}

template <size_t kBytes, float (*Dot)(const uint8_t*, int, const BlockQ8_K&)>
void gemm_i16_kquant_scalar(const GemmArgs& a, int64_t r0, int64_t r1) {
  const int64_t nb = a.n / kQK_K;
  const size_t group = static_cast<size_t>(nb) * kBytes;  // not 16 * w_stride: the packed size differs
  for (int64_t g = r0 / 16; g < r1 / 16; ++g) {
    const uint8_t* gp = static_cast<const uint8_t*>(a.w) + static_cast<size_t>(g) * group;
    for (int64_t t = 0; t < a.n_tok; ++t) {
      const auto* x = reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(a.x) + t * a.x_stride);
      for (int r = 0; r < 16; ++r) {
        float sum = 0;
        for (int64_t b = 0; b < nb; ++b) sum += Dot(gp + static_cast<size_t>(b) * kBytes, r, x[b]);
        a.y[t * a.ldy + g * 16 + r] = sum;
      }
    }
  }
}

}  // namespace

// Bytes of one super-block of a 16-row group; 0 for the other types.
size_t kquant_group_sb_bytes(DType type) {
  switch (type) {
    case DType::Q4_K: return Q4KPacked::kBytes;
    case DType::Q5_K: return Q5KPacked::kBytes;
    case DType::Q6_K: return Q6KPacked::kBytes;
    default: return 0;
  }
}

void pack_kquant_group(DType type, const void* src, void* dst, int64_t cols, int64_t g) {
  const int64_t nb = cols / kQK_K;
  uint8_t* gp = static_cast<uint8_t*>(dst) + static_cast<size_t>(g * nb) * kquant_group_sb_bytes(type);
  switch (type) {
    case DType::Q4_K:
      pack_q45k_group<Q4KPacked, BlockQ4_K, unpack_q4_k>(static_cast<const BlockQ4_K*>(src), gp, nb, g);
      break;
    case DType::Q5_K:
      pack_q45k_group<Q5KPacked, BlockQ5_K, unpack_q5_k>(static_cast<const BlockQ5_K*>(src), gp, nb, g);
      break;
    case DType::Q6_K: pack_q6_k_group(static_cast<const BlockQ6_K*>(src), gp, nb, g); break;
    default: std::abort();
  }
}

void dequantize_kquant_packed_row(DType type, const void* packed, int64_t cols, int64_t r, float* dst) {
  const int64_t nb = cols / kQK_K;
  const size_t sbb = kquant_group_sb_bytes(type);
  const auto* gp = static_cast<const uint8_t*>(packed) + static_cast<size_t>(r / 16 * nb) * sbb;
  const int row = static_cast<int>(r % 16);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* sb = gp + static_cast<size_t>(b) * sbb;
    float* y = dst + b * kQK_K;
    switch (type) {
      case DType::Q4_K: dequantize_q45k_sb<Q4KPacked>(sb, row, y); break;
      case DType::Q5_K: dequantize_q45k_sb<Q5KPacked>(sb, row, y); break;
      case DType::Q6_K: dequantize_q6k_sb(sb, row, y); break;
      default: std::abort();
    }
  }
}

void register_interleaved_kquants_scalar(Backend& be) {
  be.gemm_i16[static_cast<int>(DType::Q4_K)] = gemm_i16_kquant_scalar<Q4KPacked::kBytes, dot_q45k_sb<Q4KPacked>>;
  be.gemm_i16[static_cast<int>(DType::Q5_K)] = gemm_i16_kquant_scalar<Q5KPacked::kBytes, dot_q45k_sb<Q5KPacked>>;
  be.gemm_i16[static_cast<int>(DType::Q6_K)] = gemm_i16_kquant_scalar<Q6KPacked::kBytes, dot_q6k_sb>;
}

}  // namespace edgelm::kernels
