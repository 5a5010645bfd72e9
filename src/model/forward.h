// The transformer forward pass over a batch of tokens from any number of
// sequences (slots). One loop serves llama, qwen2 and qwen3: the differences
// are flags in ModelConfig. Every buffer comes from the ScratchLayout, so a
// step allocates nothing.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "model/attention.h"
#include "model/config.h"
#include "model/scratch.h"
#include "model/weights.h"

namespace edgelm {

// How attention rounds its arithmetic.
//  F32: the query, the scores and the running output stay in f32 (default);
//    computed in tiles (attention.h): each KV head's rows are read once per
//    step for all the query heads and tokens of a slot that use them.
//  Rows: the same f32 arithmetic one (token, query head) and one position
//    at a time, the algorithm before the tiles: a reference for tests and
//    benchmarks.
//  LlamaCpp: as llama.cpp's CPU flash attention: the query is converted to
//    the K cache's element type, positions are taken one at a time, and with
//    an f16 V cache the running output is rounded to f16 after every
//    position. With an f16 cache (the default) logits then agree with
//    llama.cpp's to float rounding; with q8_0 the query is quantized as it
//    does but the sums are taken in float, so agreement is close, not exact.
//    The cost: precision over long contexts (the f16 sum stops absorbing
//    small terms) and speed (the f16 update is a scalar loop).
enum class AttnMath : uint8_t { F32, LlamaCpp, Rows };
std::string_view attn_math_name(AttnMath m);
Result<AttnMath> parse_attn_math(std::string_view name);

class Forward {
 public:
  // scratch: layout.total bytes, 64-byte aligned, owned by the caller.
  Forward(const ModelConfig& c, const ModelWeights& w, const ScratchLayout& layout, uint8_t* scratch, KvView kv,
          ThreadPool& pool, kernels::Isa isa, AttnMath attn_math = AttnMath::F32);

  // Runs one step. Within the batch, the tokens of one slot must have
  // consecutive increasing positions; each attends to its slot's positions
  // [0, pos] (earlier steps' and this step's). Returns the logits rows, one
  // per token with `logits` set, in batch order (n_vocab floats each); the
  // pointer stays valid until the next step.
  Result<const float*> step(std::span<const BatchToken> batch);

  const ScratchLayout& layout() const { return layout_; }
  int max_tokens() const { return max_tokens_; }
  int max_logits() const { return max_logits_; }

 private:
  template <typename T>
  T* buf(size_t offset) const {
    return reinterpret_cast<T*>(scratch_ + offset);
  }
  // One matrix product of a group: out[t * w->rows + r] = W row r . in row t.
  struct Product {
    const TensorView* w;
    float* out;
  };
  // The products of one input (`in`: T rows of the weights' w->cols floats),
  // e.g. Q, K and V, or gate and up: the input is quantized once per
  // activation format, and the products whose formats share it run as one
  // parallel region, so the small ones (K and V) add no region of their own
  // with its start-up and its uneven end.
  void matmuls(std::span<const Product> products, const float* in, int T);
  void matmul(const TensorView& w, const float* in, int T, float* out) {
    const Product p{&w, out};
    matmuls({&p, 1}, in, T);
  }
  void attention(int layer, std::span<const BatchToken> batch);
  // One query head of one token, rounded as llama.cpp does (AttnMath::LlamaCpp).
  void attend_llamacpp(int layer, const BatchToken& bt, int kvh, const float* q, float* work, float* out) const;
  void rope(float* x, int T, int n_heads, std::span<const BatchToken> batch);
  // fn(t) for each of n rows of `row_elems` floats of element-wise work: on
  // the calling thread when the whole is small, else spread over the pool.
  void each_row(int n, int64_t row_elems, FunctionRef<void(int row)> fn);

  const ModelConfig& c_;
  const ModelWeights& w_;
  ScratchLayout layout_;
  uint8_t* scratch_;
  KvView kv_;
  ThreadPool& pool_;
  kernels::Isa isa_;
  AttnMath attn_math_;
  int max_tokens_;
  int max_logits_;
  float inv_freq_[512];  // per rotated pair: 1 / (base^(2i/rope_dim) * freq_factor_i)
};

}  // namespace edgelm
