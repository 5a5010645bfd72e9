// NEON attention tile kernels (see attn_avx2.cpp): 4 lanes, a scalar tail
// for rows that are not a multiple of 4. The tiles and exp are
// attn_tiles.h's.

#include <arm_neon.h>

#include "kernels/attn_tiles.h"
#include "kernels/backend.h"
#include "kernels/blocks.h"
#include "kernels/simd_neon.h"

namespace edgelm::kernels {
namespace {

using namespace neon;

struct Tiles : VecTiles<F32x4> {
  static void kv_f16(const void* src, float* dst, int64_t n) {
    const auto* h = static_cast<const uint16_t*>(src);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(dst + i, F32x4::load_f16(h + i));
    for (; i < n; ++i) dst[i] = half_to_float(h[i]);
  }

  static void kv_q8_0(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const BlockQ8_0*>(src);
    for (int64_t k = 0; k < n / kQK; ++k, dst += kQK) {
      const float d = half_to_float(b[k].d);
      for (int j = 0; j < kQK; j += 16) {
        const int8x16_t v = vld1q_s8(b[k].qs + j);
        const int16x8_t lo = vmovl_s8(vget_low_s8(v)), hi = vmovl_s8(vget_high_s8(v));
        vst1q_f32(dst + j, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d));
        vst1q_f32(dst + j + 4, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))), d));
        vst1q_f32(dst + j + 8, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d));
        vst1q_f32(dst + j + 12, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))), d));
      }
    }
  }
};

}  // namespace

void register_attn_neon(Backend& be) {
  register_attn<Tiles>(be);
  register_elementwise<F32x4>(be);
}

}  // namespace edgelm::kernels
