// Named shapes of real model families (layer counts, widths, heads), used by
// `edgelm synth` to write synthetic models and by tests of the memory plan.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "gguf/gguf.h"
#include "model/config.h"

namespace edgelm {

struct Shape {
  std::string_view name;
  Arch arch;
  int n_layers, n_embd, n_heads, n_kv_heads, head_dim, n_ff, n_vocab, n_ctx;
  float rope_base, rms_eps;
  bool tied;
};

const std::vector<Shape>& known_shapes();
Result<Shape> find_shape(std::string_view name);
// A config for a shape; n_vocab overrides the shape's vocabulary when > 0.
ModelConfig config_from_shape(const Shape& s, int n_vocab = 0);

// Quantization mixes named as llama.cpp's file types (Q4_K_M, Q8_0, ...).
struct TensorPlan {
  std::string name;
  DType type;
  std::vector<int64_t> dims;  // GGUF order: dims[0] is the row length
};
Result<std::vector<TensorPlan>> tensor_plan(const ModelConfig& c, std::string_view ftype);
std::vector<std::string_view> known_ftypes();

}  // namespace edgelm

namespace edgelm {
// Tensor-table entries for a plan (views into `plan`, which must outlive them).
std::vector<gguf::TensorInfo> tensor_infos(const std::vector<TensorPlan>& plan);
}  // namespace edgelm
