// The program bench/aarch64_gemm_proxy.sh runs under qemu-aarch64: CALLS
// decode (or NTOK-token) gemm calls of one weight type on the NEON kernels,
// a 64 x 1536 matrix of normally distributed weights in the layout the
// loader would give it (interleaved where NEON has a kernel for it). TYPE
// ATTN instead runs CALLS blocks of a decode step's attention: a GQA group
// of 6 query rows against 64 F16 cache rows of 128 (scores, each row's max
// and exp, the weighted values), as attend_tiles calls the kernels.
//
//   aarch64_gemm_count TYPE CALLS [NTOK]
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "kernels/kernels.h"

using namespace edgelm;
using namespace edgelm::kernels;

int attention_blocks(int calls) {
  constexpr int kRows = 6, kKeys = 64, kDim = 128;
  std::mt19937 rng(2);
  std::normal_distribution<float> normal;
  std::vector<float> q(kRows * kDim), s(kRows * kKeys), o(kRows * kDim, 0.0f), row(kDim);
  for (float& v : q) v = normal(rng) * 0.1f;
  std::vector<uint16_t> k(kKeys * kDim), v(kKeys * kDim);
  for (auto* rows : {&k, &v})
    for (int j = 0; j < kKeys; ++j) {
      for (float& x : row) x = normal(rng);
      store_kv(DType::F16, row.data(), rows->data() + j * kDim, kDim);
    }
  float total = 0.0f;
  for (int c = 0; c < calls; ++c) {
    attn_scores_f16(Isa::Neon, q.data(), kRows, k.data(), kKeys, kDim, s.data(), kKeys);
    for (int i = 0; i < kRows; ++i) {
      const float m = attn_max(Isa::Neon, s.data() + i * kKeys, kKeys);
      total += attn_exp_sum(Isa::Neon, s.data() + i * kKeys, kKeys, m);
    }
    attn_accumulate_f16(Isa::Neon, s.data(), kKeys, kRows, v.data(), kKeys, kDim, o.data());
  }
  std::printf("ATTN %g %g\n", static_cast<double>(total), static_cast<double>(o[0]));
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TYPE CALLS [NTOK]\n", argv[0]);
    return 2;
  }
  const std::string_view name = argv[1];
  const int calls = std::atoi(argv[2]);
  const int64_t n_tok = argc > 3 ? std::atoi(argv[3]) : 1;
  if (name == "ATTN") return attention_blocks(calls);
  DType t = DType::F32;
  bool found = false;
  for (DType c : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q2_K, DType::Q3_K,
                  DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    if (dtype_name(c) == name) t = c, found = true;
  }
  if (!found || calls < 0 || n_tok < 1) {
    std::fprintf(stderr, "unknown type or bad count: %s\n", argv[1]);
    return 2;
  }
  const int64_t rows = 64, cols = 1536;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> f(static_cast<size_t>(cols));
  const size_t rb = row_bytes(t, cols);
  std::vector<uint8_t> w(rb * rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : f) v = normal(rng);
    quantize_row(t, f.data(), w.data() + static_cast<size_t>(r) * rb, cols);
  }
  const Layout layout = preferred_layout(Isa::Neon, t, rows, cols);
  std::vector<uint8_t> packed(packed_bytes(t, layout, rows, cols));
  if (layout == Layout::Interleave16) {
    pack_rows(t, layout, w.data(), packed.data(), cols, 0, rows);
  } else {
    packed = w;
  }
  const size_t xb = act_row_bytes(t, cols);
  std::vector<uint8_t> x(xb * static_cast<size_t>(n_tok));
  for (int64_t k = 0; k < n_tok; ++k) {
    for (float& v : f) v = normal(rng);
    quantize_activation(Isa::Neon, t, f.data(), x.data() + static_cast<size_t>(k) * xb, cols);
  }
  std::vector<float> y(static_cast<size_t>(rows * n_tok));
  const GemmArgs a{t, packed.data(), rb, cols, x.data(), xb, n_tok, y.data(), rows, layout};
  for (int c = 0; c < calls; ++c) gemm(Isa::Neon, a, 0, rows);
  std::printf("%s %s %g\n", argv[1], layout == Layout::Interleave16 ? "interleaved" : "rows", static_cast<double>(y[0]));
  return 0;
}
