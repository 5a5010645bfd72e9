// AVX2 gemms over the interleaved layout: Q4_0, Q8_0, Q4_K, Q5_K and Q6_K,
// with vpmaddubsw and 16-bit sums (interleaved_ymm.h has the kernels).
// Without VNNI this is about 2.5 instructions per 32 Q4_0 products instead of
// the row layout's 6 (sign fix-up, per-row reduction and scale per block).
#include "kernels/interleaved_ymm.h"

namespace edgelm::kernels {

void register_interleaved_avx2(Backend& be) {
  register_ymm_common(be.gemm_i16);
}

}  // namespace edgelm::kernels
