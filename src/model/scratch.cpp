#include "model/scratch.h"

#include <algorithm>

#include "kernels/kernels.h"

namespace edgelm {

ScratchLayout plan_scratch(const ModelConfig& c, const ModelWeights& w, const ScratchSpec& s) {
  ScratchLayout L;
  const size_t T = static_cast<size_t>(std::max(1, s.max_tokens));
  const size_t R = static_cast<size_t>(std::max(1, s.max_logits));
  auto add = [&](std::string_view name, size_t bytes) {
    size_t off = L.total;
    L.items.push_back({name, off, bytes});
    L.total += (bytes + 63) / 64 * 64;
    return off;
  };
  const size_t f = sizeof(float);
  L.max_tokens = static_cast<int>(T);
  L.max_logits = static_cast<int>(R);
  L.n_threads = std::max(1, s.n_threads);
  L.x = add("residual", T * c.n_embd * f);
  L.xb = add("normed", T * c.n_embd * f);
  L.q = add("queries", T * c.q_dim() * f);
  L.k = add("keys", T * c.k_dim() * f);
  L.v = add("values", T * c.v_dim() * f);
  L.att = add("attention", T * c.attn_out_dim() * f);
  L.gate = add("ffn_gate", T * c.n_ff * f);
  L.up = add("ffn_up", T * c.n_ff * f);

  // Every matrix's input row is quantized once per step into the widest format.
  size_t act_row = 0;
  auto widen = [&](const TensorView& t) {
    if (t.present()) act_row = std::max(act_row, kernels::act_row_bytes(t.type, t.cols));
  };
  widen(w.output);
  for (const LayerWeights& l : w.layers)
    for (const TensorView* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) widen(*t);
  L.act_row = (act_row + 63) / 64 * 64;
  L.act = add("activations_q", T * L.act_row);

  L.logits = add("logits", R * static_cast<size_t>(c.n_vocab) * f);
  L.last = add("logit_rows", R * c.n_embd * f);
  L.rope = add("rope_table", T * static_cast<size_t>(c.rope_dim) * f);
  // Per worker, the larger of: the tiled attention's query rows, K/V block,
  // scores and accumulators (attention.h); the per-position attention's one
  // query head accumulator (head_dim_v) and a block of scores (or, with
  // AttnMath::LlamaCpp, the query converted to the K cache's type: at most
  // 2 x head_dim floats). Neither grows with the context.
  const size_t work = std::max<size_t>(kAttnBlock, 2 * static_cast<size_t>(c.head_dim));
  const size_t rows_path = (static_cast<size_t>(c.head_dim_v) + work) * f;
  const size_t tiles = attn_tile_thread_floats(attn_shape(c)) * f;
  L.per_thread = (std::max(rows_path, tiles) + 63) / 64 * 64;
  L.thread = add("attention_workers", static_cast<size_t>(L.n_threads) * L.per_thread);
  L.attn_splits = add("attention_splits", attn_split_floats(attn_shape(c), L.n_threads) * f);
  L.attn_runs = add("attention_runs", T * 2 * sizeof(int32_t));
  return L;
}

}  // namespace edgelm
