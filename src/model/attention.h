// Tiled attention over the KV cache (AttnMath::F32).
//
// One task is one slot's run of consecutive batch tokens x one KV head: the
// query rows of every (token, query head) sharing that KV head. The slot's
// cached positions are taken kAttnTilePositions at a time: the block's K and
// V rows of the head are read in place (an F16 cache: kernels::
// attn_scores_f16 and attn_accumulate_f16 convert as they load) or
// converted to f32 once into the worker's scratch (F32, Q8_0),
// scored against all query rows by a small GEMM (kernels::attn_scores),
// folded into each row's online softmax (causal: a token at position p sees
// positions <= p), and P x V is added to the rows' accumulators
// (kernels::attn_accumulate). The K/V bytes are read once per step per KV
// head and run, instead of once per (token, query head).
//
// When there are fewer tasks than workers and the context is long (decode
// of one stream has only n_kv_heads tasks), a task's blocks are split over
// several workers, each leaving a partial (max, sum, accumulator) per query
// row in the split region; a second pass merges them (flash decoding).
//
// Rounding: a row's result depends only on its own query, its position and
// the cache (blocks are aligned to multiples of kAttnTilePositions from
// position 0, and the kernels round a row the same in any tile), except
// that the split path merges partial sums in another order (a float-rounding
// difference).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/kernels.h"

namespace edgelm {

// Work below this many bytes of weights (or multiply-adds) runs on the
// calling thread: waking the others costs more than it saves, and far more
// when the cores are shared with other processes. Attention and the forward
// pass both use it.
inline constexpr int64_t kMinParallelWork = 64 * 1024;

// Where each slot's keys and values live. Each (slot, layer) owns a block
// of ctx positions; inside it every KV head's keys are contiguous over
// positions, then every head's values:
//
//   [K head 0: ctx rows of k_head bytes] ... [K head n-1] [V head 0] ... [V head n-1]
//
// so attention reads one head's keys (and values) as one stream: decode at
// depth is bound by that read, and a stream the prefetchers follow is about
// twice as fast as rows taken from every other row pair.
struct KvView {
  uint8_t* base = nullptr;
  DType type = DType::F16;
  int n_slots = 0;
  int n_layers = 0;
  int ctx = 0;         // positions per slot
  int n_kv_heads = 0;
  size_t k_head = 0;   // bytes of one head's K row (head_dim elements)
  size_t v_head = 0;   // bytes of one head's V row (head_dim_v elements)

  static KvView make(DType type, int n_slots, int n_layers, int ctx, int n_kv_heads, int head_dim, int head_dim_v) {
    KvView kv;
    kv.type = type;
    kv.n_slots = n_slots;
    kv.n_layers = n_layers;
    kv.ctx = ctx;
    kv.n_kv_heads = n_kv_heads;
    kv.k_head = row_bytes(type, head_dim);
    kv.v_head = row_bytes(type, head_dim_v);
    return kv;
  }
  // Bytes of one position over every head, keys and values.
  size_t row_pair() const { return static_cast<size_t>(n_kv_heads) * (k_head + v_head); }
  size_t layer_bytes() const { return static_cast<size_t>(ctx) * row_pair(); }
  uint8_t* layer_base(int slot, int layer) const {
    return base + (static_cast<size_t>(slot) * n_layers + layer) * layer_bytes();
  }
  uint8_t* k(int slot, int layer, int kvh, int pos) const {
    return layer_base(slot, layer) + (static_cast<size_t>(kvh) * ctx + pos) * k_head;
  }
  uint8_t* v(int slot, int layer, int kvh, int pos) const {
    return layer_base(slot, layer) + static_cast<size_t>(n_kv_heads) * ctx * k_head +
           (static_cast<size_t>(kvh) * ctx + pos) * v_head;
  }
  size_t bytes() const { return static_cast<size_t>(n_slots) * n_layers * layer_bytes(); }

  // Stores one position's keys (n_kv_heads x head_dim floats) and values.
  void store(int slot, int layer, int pos, const float* keys, int head_dim, const float* values, int head_dim_v) const;
};

// Copies positions [from, to) of every layer from (src, src_slot) to
// (dst, dst_slot); the two views differ only in base, slots and ctx.
void copy_positions(const KvView& dst, int dst_slot, const KvView& src, int src_slot, int from, int to);

struct BatchToken {
  int32_t token;  // vocabulary id, in [0, n_vocab)
  int32_t pos;    // position in its slot, in [0, ctx)
  int32_t slot;   // in [0, n_slots)
  bool logits;    // produce a row of logits for this token
};

// Positions converted and scored at a time.
constexpr int kAttnTilePositions = 64;
// Query rows of one task: whole groups of query heads, at least one group.
constexpr int kAttnTileRows = 64;
// A context shorter than this is never split across workers.
constexpr int kAttnSplitMinPositions = 4 * kAttnTilePositions;

struct AttnShape {
  int n_heads = 1;     // query heads
  int n_kv_heads = 1;  // divides n_heads
  int head_dim = 1;    // of queries and keys
  int head_dim_v = 1;  // of values and the output

  int group() const { return n_heads / n_kv_heads; }
  // Tokens of one run taken per task, and the query rows they make.
  int tile_tokens() const { return group() >= kAttnTileRows ? 1 : kAttnTileRows / group(); }
  int tile_rows() const { return tile_tokens() * group(); }
};

// Scratch the tiles need, in floats, every part a multiple of 16 floats:
// per worker, the (rows, head_dim) queries, (positions, head_dim) keys,
// (positions, head_dim_v) values, (rows, positions) scores, (rows,
// head_dim_v) accumulators and the per-row max and sum; and for the whole
// pool, the split states (3 x n_threads states of (rows, head_dim_v + 2)).
size_t attn_tile_thread_floats(const AttnShape& s);
size_t attn_split_floats(const AttnShape& s, int n_threads);

struct AttnScratch {
  float* threads = nullptr;  // pool.size() x per_thread floats
  size_t per_thread = 0;     // >= attn_tile_thread_floats
  float* splits = nullptr;   // attn_split_floats(shape, pool.size()) floats
  int32_t* runs = nullptr;   // 2 x (tokens in the batch) ints
};

// out[(t * n_heads + h) * head_dim_v + c] = attention of query head h of
// batch token t (q has the same layout with head_dim) over its slot's
// positions [0, pos] in layer `layer` of the cache. Within the batch, one
// slot's tokens have consecutive positions (Forward::step's rule).
void attend_tiles(const AttnShape& s, const KvView& kv, int layer, std::span<const BatchToken> batch,
                  const float* q, float* out, const AttnScratch& scratch, ThreadPool& pool, kernels::Isa isa);

}  // namespace edgelm
