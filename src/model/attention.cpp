#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace edgelm {

namespace {

size_t pad16(size_t n) { return (n + 15) / 16 * 16; }

// A worker's scratch, carved as attn_tile_thread_floats counts it.
struct TileBufs {
  float* q;    // (rows, head_dim) queries, pre-scaled by 1/sqrt(head_dim)
  float* k;    // (positions, head_dim) keys of the block
  float* v;    // (positions, head_dim_v) values of the block
  float* s;    // (rows, positions) scores, then probabilities
  float* acc;  // (rows, head_dim_v) running outputs
  float* m;    // (rows) running max
  float* l;    // (rows) running sum of exponentials
};

TileBufs tile_bufs(const AttnShape& sh, float* base) {
  const size_t R = static_cast<size_t>(sh.tile_rows()), B = kAttnTilePositions;
  TileBufs b;
  b.q = base;
  base += pad16(R * sh.head_dim);
  b.k = base;
  base += pad16(B * sh.head_dim);
  b.v = base;
  base += pad16(B * sh.head_dim_v);
  b.s = base;
  base += pad16(R * B);
  b.acc = base;
  base += pad16(R * sh.head_dim_v);
  b.m = base;
  base += pad16(R);
  b.l = base;
  return b;
}

// One split's partial result: (rows, head_dim_v) accumulators, then the
// rows' max, then their sums.
size_t split_state_floats(const AttnShape& sh) {
  return pad16(static_cast<size_t>(sh.tile_rows()) * (sh.head_dim_v + 2));
}

}  // namespace

void KvView::store(int slot, int layer, int pos, const float* keys, int head_dim, const float* values,
                   int head_dim_v) const {
  for (int h = 0; h < n_kv_heads; ++h) {
    kernels::store_kv(type, keys + static_cast<size_t>(h) * head_dim, k(slot, layer, h, pos), head_dim);
    kernels::store_kv(type, values + static_cast<size_t>(h) * head_dim_v, v(slot, layer, h, pos), head_dim_v);
  }
}

void copy_positions(const KvView& dst, int dst_slot, const KvView& src, int src_slot, int from, int to) {
  if (to <= from) return;
  const size_t n = static_cast<size_t>(to - from);
  for (int l = 0; l < dst.n_layers; ++l)
    for (int h = 0; h < dst.n_kv_heads; ++h) {
      std::memcpy(dst.k(dst_slot, l, h, from), src.k(src_slot, l, h, from), n * dst.k_head);
      std::memcpy(dst.v(dst_slot, l, h, from), src.v(src_slot, l, h, from), n * dst.v_head);
    }
}

size_t attn_tile_thread_floats(const AttnShape& sh) {
  const size_t R = static_cast<size_t>(sh.tile_rows()), B = kAttnTilePositions;
  return pad16(R * sh.head_dim) + pad16(B * sh.head_dim) + pad16(B * sh.head_dim_v) + pad16(R * B) +
         pad16(R * sh.head_dim_v) + 2 * pad16(R);
}

size_t attn_split_floats(const AttnShape& sh, int n_threads) {
  return 3 * static_cast<size_t>(std::max(1, n_threads)) * split_state_floats(sh);
}

void attend_tiles(const AttnShape& sh, const KvView& kv, int layer, std::span<const BatchToken> batch,
                  const float* q, float* out, const AttnScratch& scratch, ThreadPool& pool, kernels::Isa isa) {
  const int T = static_cast<int>(batch.size());
  const int g = sh.group(), hd = sh.head_dim, hdv = sh.head_dim_v, n_kvh = sh.n_kv_heads;
  const int B = kAttnTilePositions;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  // Runs: batch tokens [t0, t0 + n) of one slot at consecutive positions, at
  // most tile_tokens() of them.
  int32_t* runs = scratch.runs;
  int n_runs = 0, max_ctx = 0;
  int64_t work = 0;
  for (int t = 0; t < T;) {
    const BatchToken& b = batch[static_cast<size_t>(t)];
    int n = 1;
    while (t + n < T && n < sh.tile_tokens() && batch[static_cast<size_t>(t + n)].slot == b.slot &&
           batch[static_cast<size_t>(t + n)].pos == b.pos + n)
      ++n;
    runs[2 * n_runs] = t;
    runs[2 * n_runs + 1] = n;
    ++n_runs;
    max_ctx = std::max(max_ctx, b.pos + n);
    work += static_cast<int64_t>(b.pos + n) * n * sh.n_heads * (hd + hdv);
    t += n;
  }
  const int n_tasks = n_runs * n_kvh;
  const int threads = pool.size();
  const bool parallel = threads > 1 && work >= kMinParallelWork;
  // Splits per (run, KV head): enough tasks for about two per worker.
  const int per = parallel && n_tasks < threads && max_ctx >= kAttnSplitMinPositions && scratch.splits
                      ? (2 * threads + n_tasks - 1) / n_tasks
                      : 1;

  // F16 rows are read in place (the same bits as converting them first);
  // F32 and Q8_0 rows are converted to f32 a block at a time.
  const bool in_place = kv.type == DType::F16;

  // The online softmax of run `r`, KV head `kvh` over blocks [blk0, blk1),
  // left in the worker's acc / m / l.
  auto tile = [&](int r, int kvh, int blk0, int blk1, const TileBufs& b) {
    const int t0 = runs[2 * r], n = runs[2 * r + 1];
    const BatchToken& first = batch[static_cast<size_t>(t0)];
    const int pos0 = first.pos, last = pos0 + n - 1, R = n * g;
    for (int t = 0; t < n; ++t) {
      for (int hh = 0; hh < g; ++hh) {
        const float* src = q + (static_cast<size_t>(t0 + t) * sh.n_heads + kvh * g + hh) * hd;
        float* dst = b.q + static_cast<size_t>(t * g + hh) * hd;
        for (int c = 0; c < hd; ++c) dst[c] = src[c] * scale;
      }
    }
    std::fill(b.acc, b.acc + static_cast<size_t>(R) * hdv, 0.0f);
    std::fill(b.m, b.m + R, -INFINITY);
    std::fill(b.l, b.l + R, 0.0f);
    for (int blk = blk0; blk < blk1; ++blk) {
      const int p0 = blk * B;
      if (p0 > last) break;
      const int nk = std::min(p0 + B, last + 1) - p0;
      // Tokens before the block see none of it: the active rows are a suffix.
      const int ta = std::max(0, p0 - pos0), ra = ta * g, nr = R - ra;
      const uint8_t* kb = kv.k(first.slot, layer, kvh, p0);
      const uint8_t* vb = kv.v(first.slot, layer, kvh, p0);
      float* sa = b.s + static_cast<size_t>(ra) * B;
      // The next block's keys and values (n_next of them), requested while
      // this one is worked on: the cache is cold (a step streams the weights
      // between layers). The F16 kernels request a row of the next block
      // beside each row they read; the other types here, in one burst.
      // Measured on AVX-512 (bench/decode_bench.cpp, attend_decode/2048/*/8,
      // medians of 7 alternated runs), spread against the burst: one thread
      // 3.8 against 6.5 ms, two 2.9 against 3.4 ms. Requested into L2
      // (kernels/backend.h's request_line says why); on a Zen 4, two blocks
      // ahead instead of one measured no different, three slower.
      const int n_next = p0 + B <= last ? std::min(p0 + 2 * B, last + 1) - p0 - B : 0;
      if (in_place) {
        const auto* kn =
            n_next > 0 ? reinterpret_cast<const uint16_t*>(kb + B * kv.k_head) : nullptr;
        kernels::attn_scores_f16(isa, b.q + static_cast<size_t>(ra) * hd, nr,
                                 reinterpret_cast<const uint16_t*>(kb), nk, hd, sa, B, kn, n_next);
      } else {
        if (n_next > 0) {
          kernels::request_bytes(kb + B * kv.k_head, n_next * kv.k_head);
          kernels::request_bytes(vb + B * kv.v_head, n_next * kv.v_head);
        }
        kernels::kv_to_f32(isa, kv.type, kb, kv.k_head, nk, b.k, hd);
        kernels::kv_to_f32(isa, kv.type, vb, kv.v_head, nk, b.v, hdv);
        kernels::attn_scores(isa, b.q + static_cast<size_t>(ra) * hd, nr, b.k, nk, hd, sa, B);
      }
      for (int t = ta; t < n; ++t) {
        const int valid = std::min(nk, pos0 + t + 1 - p0);  // causal: positions <= the token's
        for (int hh = 0; hh < g; ++hh) {
          const int row = t * g + hh;
          float* sr = b.s + static_cast<size_t>(row) * B;
          const float bm = kernels::attn_max(isa, sr, valid);
          if (bm > b.m[row]) {
            const float f = std::exp(b.m[row] - bm);  // 0 on the row's first block
            float* a = b.acc + static_cast<size_t>(row) * hdv;
            for (int c = 0; c < hdv; ++c) a[c] *= f;
            b.l[row] *= f;
            b.m[row] = bm;
          }
          b.l[row] += kernels::attn_exp_sum(isa, sr, valid, b.m[row]);
          for (int j = valid; j < nk; ++j) sr[j] = 0.0f;
        }
      }
      if (in_place) {
        const auto* vn =
            n_next > 0 ? reinterpret_cast<const uint16_t*>(vb + B * kv.v_head) : nullptr;
        kernels::attn_accumulate_f16(isa, sa, B, nr, reinterpret_cast<const uint16_t*>(vb), nk, hdv,
                                     b.acc + static_cast<size_t>(ra) * hdv, vn, n_next);
      } else {
        kernels::attn_accumulate(isa, sa, B, nr, b.v, nk, hdv, b.acc + static_cast<size_t>(ra) * hdv);
      }
    }
  };
  auto out_row = [&](int r, int kvh, int row) {
    const int t = runs[2 * r] + row / g, hh = row % g;
    return out + (static_cast<size_t>(t) * sh.n_heads + kvh * g + hh) * hdv;
  };
  auto blocks_of = [&](int r) { return (batch[static_cast<size_t>(runs[2 * r])].pos + runs[2 * r + 1] - 1) / B + 1; };

  if (per == 1) {
    auto task = [&](int i, int thread) {
      const int r = i / n_kvh, kvh = i % n_kvh;
      const TileBufs b = tile_bufs(sh, scratch.threads + static_cast<size_t>(thread) * scratch.per_thread);
      tile(r, kvh, 0, blocks_of(r), b);
      for (int row = 0; row < runs[2 * r + 1] * g; ++row) {
        const float inv = 1.0f / b.l[row];
        const float* a = b.acc + static_cast<size_t>(row) * hdv;
        float* o = out_row(r, kvh, row);
        for (int c = 0; c < hdv; ++c) o[c] = a[c] * inv;
      }
    };
    if (parallel) {
      pool.run(n_tasks, task);
    } else {
      for (int i = 0; i < n_tasks; ++i) task(i, 0);
    }
    return;
  }

  // Split: each (run, KV head) over `per` workers, then a merge per (run, KV head).
  const size_t state = split_state_floats(sh);
  pool.run(n_tasks * per, [&](int i, int thread) {
    const int k = i / per, part = i % per, r = k / n_kvh, kvh = k % n_kvh;
    const int nb = blocks_of(r), R = runs[2 * r + 1] * g;
    const TileBufs b = tile_bufs(sh, scratch.threads + static_cast<size_t>(thread) * scratch.per_thread);
    tile(r, kvh, static_cast<int>(static_cast<int64_t>(nb) * part / per),
         static_cast<int>(static_cast<int64_t>(nb) * (part + 1) / per), b);
    float* st = scratch.splits + static_cast<size_t>(i) * state;
    std::copy(b.acc, b.acc + static_cast<size_t>(R) * hdv, st);
    std::copy(b.m, b.m + R, st + static_cast<size_t>(R) * hdv);
    std::copy(b.l, b.l + R, st + static_cast<size_t>(R) * hdv + R);
  });
  pool.run(n_tasks, [&](int k, int) {
    const int r = k / n_kvh, kvh = k % n_kvh, R = runs[2 * r + 1] * g;
    const float* st0 = scratch.splits + static_cast<size_t>(k) * per * state;
    for (int row = 0; row < R; ++row) {
      float mx = -INFINITY;
      for (int p = 0; p < per; ++p) mx = std::max(mx, st0[p * state + static_cast<size_t>(R) * hdv + row]);
      float* o = out_row(r, kvh, row);
      std::fill(o, o + hdv, 0.0f);
      float l = 0.0f;
      for (int p = 0; p < per; ++p) {
        const float* st = st0 + p * state;
        const float m = st[static_cast<size_t>(R) * hdv + row];
        if (m == -INFINITY) continue;  // no position of this part is visible to the row
        const float f = std::exp(m - mx);
        l += f * st[static_cast<size_t>(R) * hdv + R + row];
        const float* a = st + static_cast<size_t>(row) * hdv;
        for (int c = 0; c < hdv; ++c) o[c] += f * a[c];
      }
      const float inv = 1.0f / l;
      for (int c = 0; c < hdv; ++c) o[c] *= inv;
    }
  });
}

}  // namespace edgelm
