// Internal: what the interleaved-layout (Layout::Interleave16) gemms share: the
// layout facts they read (block sizes, offsets, activation trailer), and their
// loop nest, for the 32-element and the K-format kernels of every ISA. For
// the loop nest a kernel supplies its tile as a callable
//
//   tile.template operator()<G, T>(const uint8_t* gp, int64_t t0, float* y)
//     // G groups of 16 rows from gp, tokens [t0, t0 + T), y = the output
//     // column of the first row of the first group. G is 2 only for both
//     // groups of a pair (GroupBlocks::kPaired) and one token: the second group's
//     // blocks start F::kBlock after the first's.
//
// Loop order: decode (one token) takes one group, or one pair of a paired
// format, at a time (one weight stream per thread); otherwise tokens in
// chunks whose activations stay in L2, within a chunk groups of rows (each
// group's weights read from memory once per chunk, then from L1/L2 for every
// token tile), within a group token tiles of 8 and one tail tile.
//
// Internal linkage, as tile_driver.h: only for files compiled with the same
// target flags as the kernel that includes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/blocks.h"
#include "kernels/kernels.h"

namespace edgelm::kernels {
namespace {

// ---- what every interleaved kernel reads of the layout (pack.cpp,
// pack_kquants.cpp) and of the Q8_0 activation row (dispatch.cpp) ----------

// Block b's sum of quants, from the trailer of an activation row of nb
// blocks of XB (BlockQ8_0 or BlockQ8_1).
template <class XB = BlockQ8_0>
inline int32_t i16_block_sum(const uint8_t* act_row, int64_t nb, int64_t b) {
  int32_t v;
  std::memcpy(&v, act_row + static_cast<size_t>(nb) * sizeof(XB) + static_cast<size_t>(b) * 4, 4);
  return v;
}

// Where block b's integer sum starts for a format whose loaded quants
// exceed the true ones by F::kOffset (Q4_0's unsigned nibbles 8, x86's Q8_0
// 128): -kOffset x the activations' sum, which removes the offset exactly.
template <class F, class XB = BlockQ8_0>
inline int32_t i16_start(const uint8_t* act_row, int64_t nb, int64_t b) {
  if constexpr (F::kOffset == 0) {
    return 0;
  } else {
    return -F::kOffset * i16_block_sum<XB>(act_row, nb, b);
  }
}

// A 32-element format's blocks of a 16-row group: kBlock bytes each, kStep
// apart. The 4- and 5-bit formats store their groups in pairs (kPaired,
// pack.cpp): block b of pair p is group 2p's block b followed by group
// 2p + 1's, so one group's blocks are kStep = 2 kBlock apart, its partner's
// start kBlock after its own, and a pair's blocks form one stream of whole
// cache lines (Q4_0 576 bytes, 9 lines; a lone group's 288 would start half
// of its blocks mid-line) that decode reads for 32 rows at once. Q8_0 keeps
// its groups one after another: paired, its decode gained 2-3% but its
// prompt tiles (one group at a time over a stream whose every other block
// is the partner's) lost 8-12% (bench/decode_bench.cpp, AVX-512 and
// AVX-VNNI, alternated runs on a busy machine).
template <size_t kBlockBytes, bool kPairs>
struct GroupBlocks {
  static constexpr size_t kBlock = kBlockBytes;
  static constexpr bool kPaired = kPairs;
  static constexpr size_t kStep = kPairs ? 2 * kBlockBytes : kBlockBytes;
};

// Q4_0 / Q8_0: bytes of one block of a 16-row group, and the activation
// bytes that meet quant vector c (Q4_0: 4c.. for the low nibbles c < 4,
// 16 + 4(c - 4).. for the high ones).
struct Q4_0Layout : GroupBlocks<16 * sizeof(BlockQ4_0), true> {
  static constexpr int32_t kOffset = 8;  // read as unsigned nibbles
  static constexpr size_t kQuants = 32;
  static constexpr int act_offset(int c) { return c < 4 ? 4 * c : 16 + 4 * (c - 4); }
};
// Q5_0: Q4_0's chunks, then the fifth bits (pack.cpp), inverted, one byte
// per byte of a chunk (byte 4r + j of the 64 at kHigh: row r, position j;
// bit c for the low nibble of chunk c, bit 4 + c for the high one). x86
// reads q (0..31) unsigned; NEON q - 16, signed.
struct Q5_0Layout : GroupBlocks<16 * sizeof(BlockQ5_0), true> {
  static constexpr size_t kQuants = 32, kHigh = 32 + 4 * 64;
  static constexpr int32_t kOffset = 16;
  static constexpr int act_offset(int c) { return Q4_0Layout::act_offset(c); }
};
// Q4_1 and Q5_1: the scales d[16], the minimums m[16], then Q4_0's chunks
// (and Q5_1 Q5_0's fifth bits). Activations are Q8_1 rows.
struct Q4_1Layout : GroupBlocks<16 * sizeof(BlockQ4_1), true> {
  static constexpr size_t kMinsAt = 32, kQuants = 64;
};
struct Q5_1Layout : GroupBlocks<16 * sizeof(BlockQ5_1), true> {
  static constexpr size_t kMinsAt = 32, kQuants = 64, kHigh = 64 + 4 * 64;
};
struct Q8_0Layout : GroupBlocks<16 * sizeof(BlockQ8_0), false> {
  static constexpr size_t kQuants = 32;
  static constexpr int32_t kOffset = kQ8_0PackedBias;  // x86 128, ARM 0
  static constexpr int act_offset(int c) { return 4 * c; }
};

// Q4_K and Q5_K: one super-block of a group, its 8 sub-blocks of 32 (8
// quant vectors each), and where the scales, minimums and quants start.
template <bool kFifthBit>
struct Q45KLayout {
  static constexpr size_t kBytes = kFifthBit ? 2880 : 2368;
  static constexpr int kSubs = 8, kVecs = 8;
  static constexpr bool kMins = true;
  static constexpr size_t kScales = 64, kMinsAt = 192, kQuants = 320, kSubBytes = kFifthBit ? 320 : 256;
  static constexpr int act_offset(int j, int c) { return 32 * j + (c < 4 ? 4 * c : 16 + 4 * (c - 4)); }
  // How many super-blocks ahead x86 decode requests (prefetch_next_sub):
  // one (2368 bytes for Q4_K) is less than a core keeps in flight at 20-30
  // GB/s. The figures: interleaved_kquants_avx512.cpp's kAhead and
  // interleaved_ymm.h's whole_pass.
  static constexpr int kDecodeAhead = 2;
};
// Q6_K: 16 sub-blocks of 16 (4 quant vectors each), int8 scales, no minimums.
struct Q6KLayout {
  static constexpr size_t kBytes = 3360;
  static constexpr int kSubs = 16, kVecs = 4;
  static constexpr bool kMins = false;
  static constexpr size_t kScales = 32, kQuants = 288, kSubBytes = 192;
  static constexpr int act_offset(int j, int c) { return 16 * j + 4 * c; }
  static constexpr int kDecodeAhead = 1;  // two was slower (kAhead's figures)
};

// NEON decode's prefetch of a pair's block (the x86 decode tiles of these
// formats request nothing: interleaved_avx512.cpp's kPrefetch): every
// 64-byte line that starts in [ahead, ahead + kBytes), into the cache at
// kLocality (__builtin_prefetch's: 0 is x86's prefetchnta, 3 prefetcht0).
// Over a stream of kBytes steps that is each line once, the line a step
// starts mid-way in going with the step before. A multiple of 64 (a pair's
// block: Q4_0 576 bytes) holds exactly kBytes / 64 line starts wherever it
// begins: a fixed count, which unrolls. Not a callback: GCC 12 dropped
// _mm_prefetch called from a lambda passed here.
template <size_t kBytes, int kLocality>
inline __attribute__((always_inline)) void prefetch_lines(const uint8_t* ahead) {
  static_assert(kBytes % 64 == 0);
  const uintptr_t first = (reinterpret_cast<uintptr_t>(ahead) + 63) & ~uintptr_t{63};
#pragma GCC unroll 16
  for (size_t i = 0; i < kBytes / 64; ++i)
    __builtin_prefetch(reinterpret_cast<const char*>(first + 64 * i), 0, kLocality);
}

// Prompt tiles' prefetch (and a lone group's decode on NEON): every 64
// bytes of the kBytes from `ahead`, a block's own start, at kLocality as
// above. A group's blocks are not one stream of lines when its groups go
// in pairs (its partner's block lies between two of its own), so the line
// a block starts mid-way in is requested with it (interleaved_avx512.cpp's
// tile).
template <size_t kBytes, int kLocality>
inline __attribute__((always_inline)) void prefetch_from(const uint8_t* ahead) {
  for (size_t off = 0; off < kBytes; off += 64)
    __builtin_prefetch(reinterpret_cast<const char*>(ahead + off), 0, kLocality);
}

// The K formats' prefetch on x86: the same part of the super-block kAhead
// after the one at sb (a format F of kSubs sub-blocks in kBytes) as
// sub-block j, every 64 bytes from that part's start, at kLocality as above.
template <class F, int kLocality, int kAhead = 1>
inline __attribute__((always_inline)) void prefetch_next_sub(const uint8_t* sb, int j) {
  constexpr size_t kSub = F::kBytes / F::kSubs;
  prefetch_from<kSub + 63, kLocality>(sb + kAhead * F::kBytes + j * kSub);
}

constexpr int kI16Tile = 8;                    // tokens per tile
constexpr size_t kI16ChunkBytes = 384 * 1024;  // activations per token chunk

template <int T, class Tile>
inline void i16_tail(Tile& tile, const uint8_t* gp, int64_t t0, int64_t rem, float* y) {
  if constexpr (T > 0) {
    if (rem == T) {
      tile.template operator()<1, T>(gp, t0, y);
    } else {
      i16_tail<T - 1>(tile, gp, t0, rem, y);
    }
  }
}

// Where a matrix's 16-row groups start: one after another, group_bytes
// apart (the K formats and Q8_0), or kPaired (GroupBlocks):
// pair p at 2p x group_bytes, its odd group `partner` bytes after its even
// one.
template <bool kPaired>
struct Groups {
  size_t group_bytes;
  size_t partner = 0;
  size_t offset(int64_t g) const {
    if constexpr (kPaired) {
      return static_cast<size_t>(g & ~int64_t{1}) * group_bytes +
             static_cast<size_t>(g & 1) * partner;
    } else {
      return static_cast<size_t>(g) * group_bytes;
    }
  }
  const uint8_t* at(const uint8_t* w, int64_t g) const { return w + offset(g); }
};

// The groups of a matrix of a 32-element format F.
template <class F>
Groups<F::kPaired> groups_of(const GemmArgs& a) {
  return {16 * a.w_stride, F::kPaired ? F::kBlock : 0};
}

// Rows [r0, r1) (multiples of 16) of the matrix at w, its groups placed as
// `groups` says.
template <bool kPaired, class Tile>
inline void i16_drive(const GemmArgs& a, int64_t r0, int64_t r1, Groups<kPaired> groups,
                      Tile&& tile) {
  const auto* w = static_cast<const uint8_t*>(a.w);
  const int64_t g_end = r1 / 16;
  if (a.n_tok == 1) {
    // One weight stream per thread. Two groups at once from two streams
    // read slower: single-thread CPU time per 62 MB of Q4_0
    // (bench/decode_bench.cpp's bm_gemv_i16, AVX-512, a shared machine)
    // 5.5-5.9 ms with two groups 16 rows apart, 3.7-5.2 ms with one. A
    // pair of a paired format is one stream: its two groups go together
    // (G = 2), and each activation block is read once for 32 rows.
    int64_t g = r0 / 16;
    if constexpr (kPaired) {
      if (g % 2 == 1 && g < g_end) {
        tile.template operator()<1, 1>(groups.at(w, g), 0, a.y + g * 16);
        ++g;
      }
      for (; g + 1 < g_end; g += 2)
        tile.template operator()<2, 1>(groups.at(w, g), 0, a.y + g * 16);
    }
    for (; g < g_end; ++g) tile.template operator()<1, 1>(groups.at(w, g), 0, a.y + g * 16);
    return;
  }
  int64_t chunk = static_cast<int64_t>(kI16ChunkBytes / (a.x_stride > 0 ? a.x_stride : 1)) / kI16Tile * kI16Tile;
  if (chunk < kI16Tile) chunk = kI16Tile;
  for (int64_t c0 = 0; c0 < a.n_tok; c0 += chunk) {
    const int64_t c1 = c0 + chunk < a.n_tok ? c0 + chunk : a.n_tok;
    for (int64_t g = r0 / 16; g < g_end; ++g) {
      const uint8_t* gp = groups.at(w, g);
      float* y = a.y + g * 16;
      int64_t t = c0;
      for (; t + kI16Tile <= c1; t += kI16Tile) tile.template operator()<1, kI16Tile>(gp, t, y);
      if (t < c1) i16_tail<kI16Tile - 1>(tile, gp, t, c1 - t, y);
    }
  }
}

}  // namespace
}  // namespace edgelm::kernels
