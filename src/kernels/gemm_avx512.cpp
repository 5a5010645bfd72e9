// AVX-512 kernels (placeholder while being written).
#include "kernels/backend.h"

namespace edgelm::kernels {
const Backend& avx512_backend() {
  static const Backend be;
  return be;
}
}  // namespace edgelm::kernels
