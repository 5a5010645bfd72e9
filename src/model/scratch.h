// The forward pass's working memory, laid out once from the config. The memory
// plan counts exactly these bytes and the engine allocates exactly these bytes:
// one function decides both, so the plan cannot drift from the code.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "model/attention.h"
#include "model/config.h"
#include "model/weights.h"

namespace edgelm {

// Positions scored at a time by the per-position attention (AttnMath::Rows
// and LlamaCpp; the tiles use kAttnTilePositions).
constexpr int kAttnBlock = 256;

inline AttnShape attn_shape(const ModelConfig& c) {
  return AttnShape{c.n_heads, c.n_kv_heads, c.head_dim, c.head_dim_v};
}

struct ScratchSpec {
  int max_tokens = 1;  // tokens in one forward step (decode tokens + prefill chunk)
  int max_logits = 1;  // rows of logits one step produces (at most one per slot)
  int n_threads = 1;   // workers that need private attention scratch
};

// Byte offsets of each buffer inside one 64-byte-aligned block.
struct ScratchLayout {
  struct Item {
    std::string_view name;
    size_t offset;
    size_t bytes;
  };
  std::vector<Item> items;
  size_t total = 0;
  int max_tokens = 1;
  int max_logits = 1;
  int n_threads = 1;

  // Offsets (all 64-byte aligned). Shapes with T = max_tokens:
  size_t x = 0;       // (T, n_embd) f32 residual stream
  size_t xb = 0;      // (T, n_embd) f32 normed input of a sublayer
  size_t q = 0;       // (T, q_dim) f32
  size_t k = 0;       // (T, k_dim) f32, new keys before they go into the cache
  size_t v = 0;       // (T, v_dim) f32
  size_t att = 0;     // (T, attn_out_dim) f32 attention output
  size_t gate = 0;    // (T, n_ff) f32
  size_t up = 0;      // (T, n_ff) f32
  size_t act = 0;     // (T, widest input) activations in the integer-dot format
  size_t logits = 0;  // (max_logits, n_vocab) f32
  size_t last = 0;    // (max_logits, n_embd) f32 normed rows that produce logits
  size_t rope = 0;    // (T, rope_dim) f32: cos and sin per rotated pair
  size_t thread = 0;  // (n_threads, per_thread) attention accumulators and tiles
  size_t per_thread = 0;
  size_t attn_splits = 0;  // attn_split_floats(n_threads) f32: partial results of split attention
  size_t attn_runs = 0;    // (T, 2) int32: the batch's runs of one slot's tokens
  size_t act_row = 0;  // bytes of one activation row of `act`
};

ScratchLayout plan_scratch(const ModelConfig& c, const ModelWeights& w, const ScratchSpec& s);

}  // namespace edgelm
