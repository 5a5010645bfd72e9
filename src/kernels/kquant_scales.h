// Unpacking (and packing) of the 6-bit sub-block scales of the K formats.
// Static inline for the reason given in fp16.h.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/blocks.h"

namespace edgelm::kernels {

// Q4_K / Q5_K: 8 scales and 8 mins of 6 bits in 12 bytes. For j < 4 the low
// 6 bits of p[j] / p[j + 4] are scale / min j; for j >= 4 the low 4 bits come
// from the nibbles of p[j + 4] and the top 2 bits from the spare top bits of
// p[j - 4] (scale) and p[j] (min).
static inline void unpack_q4k_scales(const uint8_t* p, uint8_t sc[8], uint8_t mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = p[j] & 63;
    mn[j] = p[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>((p[j + 4] & 0xf) | ((p[j - 4] >> 6) << 4));
    mn[j] = static_cast<uint8_t>((p[j + 4] >> 4) | ((p[j] >> 6) << 4));
  }
}

static inline void pack_q4k_scales(const uint8_t sc[8], const uint8_t mn[8], uint8_t* p) {
  for (int j = 0; j < 4; ++j) {
    p[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    p[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    p[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xf) | ((mn[j + 4] & 0xf) << 4));
  }
}

// The same unpacking done four bytes at a time, for the SIMD kernels (the
// reference above is the oracle for both): byte j of *sc / *mn is scale /
// min j.
static inline void unpack_q4k_scale_words(const uint8_t* p, uint64_t* sc, uint64_t* mn) {
  uint32_t p0, p1, p2;
  std::memcpy(&p0, p, 4);
  std::memcpy(&p1, p + 4, 4);
  std::memcpy(&p2, p + 8, 4);
  const uint32_t sc_hi = (p2 & 0x0f0f0f0fu) | (((p0 >> 6) & 0x03030303u) << 4);
  const uint32_t mn_hi = ((p2 >> 4) & 0x0f0f0f0fu) | (((p1 >> 6) & 0x03030303u) << 4);
  *sc = (p0 & 0x3f3f3f3fu) | (static_cast<uint64_t>(sc_hi) << 32);
  *mn = (p1 & 0x3f3f3f3fu) | (static_cast<uint64_t>(mn_hi) << 32);
}

// Q3_K: 16 signed scales (stored biased by 32) of 6 bits in 12 bytes; see
// BlockQ3_K. Returns them unbiased, in [-32, 31].
static inline void unpack_q3k_scales(const uint8_t* p, int8_t out[16]) {
  for (int j = 0; j < 16; ++j) {
    const int lo = j < 8 ? (p[j] & 0xf) : (p[j - 8] >> 4);
    const int hi = (p[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = static_cast<int8_t>((lo | (hi << 4)) - 32);
  }
}

// Four bytes at a time, still biased: byte k of w[q] is scale 4q + k plus 32.
// Scale j: low nibble from byte j % 8 (high half for j >= 8), top bits from
// byte 8 + j % 4 at 2 * (j / 4).
static inline void unpack_q3k_biased_words(const uint8_t* p, uint32_t w[4]) {
  uint32_t p0, p1, p2;
  std::memcpy(&p0, p, 4);
  std::memcpy(&p1, p + 4, 4);
  std::memcpy(&p2, p + 8, 4);
  w[0] = (p0 & 0x0f0f0f0fu) | ((p2 & 0x03030303u) << 4);
  w[1] = (p1 & 0x0f0f0f0fu) | (((p2 >> 2) & 0x03030303u) << 4);
  w[2] = ((p0 >> 4) & 0x0f0f0f0fu) | (((p2 >> 4) & 0x03030303u) << 4);
  w[3] = ((p1 >> 4) & 0x0f0f0f0fu) | (((p2 >> 6) & 0x03030303u) << 4);
}

// `biased` holds values in [0, 63] (the scale plus 32).
static inline void pack_q3k_scales(const uint8_t biased[16], uint8_t* p) {
  std::memset(p, 0, 12);
  for (int j = 0; j < 16; ++j) {
    const int lo = biased[j] & 0xf;
    const int hi = (biased[j] >> 4) & 3;
    p[j % 8] = static_cast<uint8_t>(p[j % 8] | (j < 8 ? lo : lo << 4));
    p[8 + j % 4] = static_cast<uint8_t>(p[8 + j % 4] | (hi << (2 * (j / 4))));
  }
}

}  // namespace edgelm::kernels
