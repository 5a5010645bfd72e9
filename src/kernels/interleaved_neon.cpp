// NEON (dotprod) gemm over the interleaved layout (pack.cpp) for Q4_0,
// Q5_0, Q8_0, Q4_1 and Q5_1. The layout is the x86 one, read 16 bytes at a
// time: bytes [16k, 16k + 16) of a 64-byte quant chunk are rows 4k..4k+3,
// four consecutive elements each, which is exactly what
// vdotq_laneq_s32(acc, w, x, lane) takes: four int32 lanes, one per row, each
// the dot product of the row's four bytes with the four activation bytes in
// `lane` of x. So one sdot does 4 rows x 4 elements with no per-row
// reduction; a block's 32 activation bytes are two registers, loaded once
// and used by every row of the group.
//
// Per block and quarter (4 rows) the quants become eight int8x16 vectors:
// Q4_0 and Q4_1 split each of their four 16-byte loads into low nibbles
// (elements 4c..4c+3) and high nibbles (16 + 4c..), left unsigned (0..15);
// Q4_0's integer sum starts from -8 x the activations' block sum (the
// activation row's trailer), which removes its offset exactly, as on x86.
// Q5_0 and Q5_1 join the fifth bits to the nibbles as q - 16 (Q5_1's sum
// then starts from +16 x the block sum, giving q's own dot product). Q8_0's
// quants are packed as stored on ARM (kQ8_0PackedBias is 0 there, where x86
// adds 128 for vpdpbusd), so sdot reads them directly. Q4_1 and Q5_1 add
// their minimums' term, m x the activation block's s, per block and quarter.
//
// Cost per 4 rows x 32 weights, Q4_0 decode: one load, AND, shift, two sdot,
// plus per block and quarter a conversion and two multiplies for the scales;
// the row kernel (gemm_neon.cpp) spends a load, AND, shift, two subtracts, two
// sdot, a conversion, a multiply-add and a scale load per row and block.
//
// The loop nest around the tiles is interleaved_driver.h's: decode takes
// all 16 rows of a group, or 32 of a pair, per pass (one sequential weight
// stream); prompts take a quarter of a group at a time for up to four
// tokens, so a quarter's eight decoded vectors stay in registers while
// every token of the sub-tile uses them.
#include <arm_neon.h>

#if defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include "kernels/backend.h"
#include "kernels/interleaved_neon.h"

namespace edgelm::kernels {

// Token pairs by smmla for the prompt case (interleaved_neon_i8mm.cpp).
void register_interleaved_i8mm(Backend& be);
// Q4_K, Q5_K and Q6_K (interleaved_kquants_neon.cpp).
void register_interleaved_kquants_neon(Backend& be);

namespace {

// HWCAP2_I8MM: the i8mm file's instructions fault on a core without it
// (RK3588's A76 and A55 among them).
bool cpu_has_i8mm() {
#if defined(__linux__) && defined(HWCAP2_I8MM)
  return (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0;
#else
  return false;
#endif
}

// Prompt sub-tiles by sdot: every token of the sub-tile in one pass.
struct SdotPass {
  template <class F, int TS>
  static void run(const uint8_t* gp, int k, int64_t nb, const uint8_t* const* xr, float* y, int64_t ldy) {
    quarter_pass<F, TS>(gp, k, nb, xr, y, ldy);
  }
};

}  // namespace

void register_interleaved_neon(Backend& be) {
  be.gemm_i16[static_cast<int>(DType::Q4_0)] = gemm_i16<SdotPass, Q4_0Quarter>;
  be.gemm_i16[static_cast<int>(DType::Q8_0)] = gemm_i16<SdotPass, Q8_0Quarter>;
  be.gemm_i16[static_cast<int>(DType::Q5_0)] = gemm_i16<SdotPass, Q5_0Quarter>;
  be.gemm_i16[static_cast<int>(DType::Q4_1)] = gemm_i16<SdotPass, Q4_1Quarter>;
  be.gemm_i16[static_cast<int>(DType::Q5_1)] = gemm_i16<SdotPass, Q5_1Quarter>;
  register_interleaved_kquants_neon(be);
  if (cpu_has_i8mm()) register_interleaved_i8mm(be);
}

}  // namespace edgelm::kernels
