// AVX-VNNI (256-bit vpdpbusd without AVX-512: Intel Alder Lake and later
// client cores, the N100 and its kin, AMD Zen 5) gemms over the interleaved
// layout: the AVX2 kernels of interleaved_ymm.h with one vpdpbusd in place of
// each vpmaddubsw and its share of the widening, and Q8_0 beside them (its
// packed q + 128 needs the 32-bit sums). This is the whole table of the
// `avxvnni` ISA: every other entry falls through to AVX2 (dispatch.cpp).
#include "kernels/interleaved_ymm.h"

#if !defined(__AVXVNNI__)
#error "interleaved_avxvnni.cpp needs -mavxvnni (see edgelm_module in CMakeLists.txt)"
#endif

namespace edgelm::kernels {
namespace {

Backend make_backend() {
  Backend be;
  register_ymm_common(be.gemm_i16);
  return be;
}

}  // namespace

const Backend& avxvnni_backend() {
  static const Backend be = make_backend();
  return be;
}

}  // namespace edgelm::kernels
