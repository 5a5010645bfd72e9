// Weights as typed views into the mapped GGUF file: nothing is copied.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/config.h"

namespace edgelm {

// A 1-D or 2-D tensor in the file. Rows are contiguous: row r of a matrix
// with `cols` elements per row starts at data + r * row_bytes.
struct TensorView {
  const uint8_t* data = nullptr;
  DType type = DType::F32;
  int64_t cols = 0;  // elements per row (GGUF ne[0]); the dot-product length
  int64_t rows = 0;  // GGUF ne[1]; 1 for vectors
  size_t row_bytes = 0;
  std::string_view name;
  kernels::Layout layout = kernels::Layout::Rows;  // Interleave16 once packed (model/model.h)

  bool present() const { return data != nullptr; }
  // Bytes in memory (the packed size once packed).
  size_t bytes() const {
    return layout == kernels::Layout::Rows ? row_bytes * static_cast<size_t>(rows)
                                           : kernels::packed_bytes(type, layout, rows, cols);
  }
  const float* f32() const { return reinterpret_cast<const float*>(data); }
};

struct LayerWeights {
  TensorView attn_norm;  // (n_embd)
  TensorView wq;         // (q_dim rows, n_embd cols)
  TensorView wk;         // (k_dim, n_embd)
  TensorView wv;         // (v_dim, n_embd)
  TensorView wo;         // (n_embd, attn_out_dim)
  TensorView bq, bk, bv;          // qwen2: (q_dim), (k_dim), (v_dim)
  TensorView q_norm, k_norm;      // qwen3: (head_dim)
  TensorView ffn_norm;   // (n_embd)
  TensorView w_gate;     // (n_ff, n_embd)
  TensorView w_up;       // (n_ff, n_embd)
  TensorView w_down;     // (n_embd, n_ff)
};

struct ModelWeights {
  TensorView token_embd;  // (n_vocab rows, n_embd cols)
  TensorView output_norm; // (n_embd)
  TensorView output;      // (n_vocab, n_embd); token_embd when tied
  TensorView rope_freqs;  // llama 3: (rope_dim / 2), optional
  std::vector<LayerWeights> layers;

  // Bytes of tensor data the forward pass reads (a tied output counted once).
  uint64_t bytes() const;
  // The same once packed for `isa`'s preferred layouts (Model::pack_for).
  uint64_t bytes_packed_for(kernels::Isa isa) const;
};

// Binds every tensor the forward pass needs, checking presence, shape and
// that edgelm has kernels for its type. Errors name the tensor.
Result<ModelWeights> bind_weights(const gguf::File& f, const ModelConfig& c);
// The same checks over a tensor table with no data behind it (planning only:
// the views' pointers must not be read).
Result<ModelWeights> plan_weights(const ModelConfig& c, const std::vector<gguf::TensorInfo>& tensors);

}  // namespace edgelm
