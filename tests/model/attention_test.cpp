// Tiled attention (attend_tiles) against a plain per-position reference in
// double precision, for GQA groups 1, 2, 6 and 7, f32 / f16 / q8_0 caches,
// batches mixing slots and positions, causal prefill runs, and contexts
// long enough to take the split (flash-decoding) path.

#include "model/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <random>
#include <vector>

#include "core/thread_pool.h"

namespace edgelm {
namespace {

struct Cache {
  Cache(const AttnShape& sh, DType type, int slots, int layers, int ctx) {
    kv = KvView::make(type, slots, layers, ctx, sh.n_kv_heads, sh.head_dim, sh.head_dim_v);
    bytes.resize(kv.bytes());
    kv.base = bytes.data();
  }
  // Random keys and values in every row.
  void fill(const AttnShape& sh, std::mt19937& rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> k(static_cast<size_t>(sh.n_kv_heads) * sh.head_dim),
        v(static_cast<size_t>(sh.n_kv_heads) * sh.head_dim_v);
    for (int s = 0; s < kv.n_slots; ++s)
      for (int l = 0; l < kv.n_layers; ++l)
        for (int p = 0; p < kv.ctx; ++p) {
          for (auto& x : k) x = 2.0f * nd(rng);
          for (auto& x : v) x = nd(rng);
          kv.store(s, l, p, k.data(), sh.head_dim, v.data(), sh.head_dim_v);
        }
  }
  KvView kv;
  std::vector<uint8_t> bytes;
};

// One (token, head) by the definition: softmax over positions [0, pos] in double.
std::vector<double> reference(const AttnShape& sh, const KvView& kv, int layer, const BatchToken& bt, const float* q,
                              int h) {
  const int kvh = h / sh.group();
  std::vector<float> k(static_cast<size_t>(sh.head_dim)), v(static_cast<size_t>(sh.head_dim_v));
  std::vector<double> s(static_cast<size_t>(bt.pos) + 1), out(static_cast<size_t>(sh.head_dim_v), 0.0);
  double mx = -1e300;
  for (int p = 0; p <= bt.pos; ++p) {
    kernels::dequantize_row(kv.type, kv.k(bt.slot, layer, kvh, p), k.data(), sh.head_dim);
    double d = 0;
    for (int c = 0; c < sh.head_dim; ++c) d += static_cast<double>(q[c]) * k[static_cast<size_t>(c)];
    s[static_cast<size_t>(p)] = d / std::sqrt(static_cast<double>(sh.head_dim));
    mx = std::max(mx, s[static_cast<size_t>(p)]);
  }
  double sum = 0;
  for (int p = 0; p <= bt.pos; ++p) {
    const double e = std::exp(s[static_cast<size_t>(p)] - mx);
    sum += e;
    kernels::dequantize_row(kv.type, kv.v(bt.slot, layer, kvh, p), v.data(), sh.head_dim_v);
    for (int c = 0; c < sh.head_dim_v; ++c) out[static_cast<size_t>(c)] += e * v[static_cast<size_t>(c)];
  }
  for (auto& x : out) x /= sum;
  return out;
}

struct Runner {
  Runner(const AttnShape& shape, int threads, int max_tokens) : sh(shape), pool(threads) {
    per_thread = attn_tile_thread_floats(sh);
    threads_mem.resize(per_thread * static_cast<size_t>(threads));
    splits.resize(attn_split_floats(sh, threads));
    runs.resize(2 * static_cast<size_t>(max_tokens));
  }
  std::vector<float> run(const KvView& kv, int layer, const std::vector<BatchToken>& batch, const std::vector<float>& q,
                         kernels::Isa isa = kernels::best_isa()) {
    std::vector<float> out(batch.size() * static_cast<size_t>(sh.n_heads) * sh.head_dim_v, NAN);
    AttnScratch sc{threads_mem.data(), per_thread, splits.data(), runs.data()};
    attend_tiles(sh, kv, layer, batch, q.data(), out.data(), sc, pool, isa);
    return out;
  }
  AttnShape sh;
  ThreadPool pool;
  size_t per_thread;
  std::vector<float> threads_mem, splits;
  std::vector<int32_t> runs;
};

std::vector<float> random_queries(const AttnShape& sh, size_t tokens, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> q(tokens * static_cast<size_t>(sh.n_heads) * sh.head_dim);
  for (auto& x : q) x = nd(rng);
  return q;
}

// Worst error relative to the output's magnitude, over every (token, head).
double check(const AttnShape& sh, const KvView& kv, int layer, const std::vector<BatchToken>& batch,
             const std::vector<float>& q, const std::vector<float>& out) {
  double worst = 0;
  for (size_t t = 0; t < batch.size(); ++t) {
    for (int h = 0; h < sh.n_heads; ++h) {
      const float* qh = q.data() + (t * sh.n_heads + h) * sh.head_dim;
      const auto want = reference(sh, kv, layer, batch[t], qh, h);
      const float* got = out.data() + (t * sh.n_heads + h) * sh.head_dim_v;
      double mag = 0;
      for (double w : want) mag = std::max(mag, std::fabs(w));
      for (int c = 0; c < sh.head_dim_v; ++c)
        worst = std::max(worst, std::fabs(got[c] - want[static_cast<size_t>(c)]) / std::max(mag, 1e-3));
    }
  }
  return worst;
}

struct Case {
  AttnShape sh;
  DType kv;
};

class AttendTiles : public ::testing::TestWithParam<Case> {};

// Decode tokens of three slots at scattered positions, and a causal prefill
// run of one slot crossing block boundaries, in one batch.
TEST_P(AttendTiles, MixedBatchMatchesReference) {
  const Case& cs = GetParam();
  std::mt19937 rng(21);
  Cache cache(cs.sh, cs.kv, 3, 2, 200);
  cache.fill(cs.sh, rng);
  std::vector<BatchToken> batch = {{0, 0, 0, true}, {0, 130, 1, true}, {0, 63, 2, true}};
  for (int p = 60; p < 60 + 75; ++p) batch.push_back({0, p, 0, false});  // a second run of slot 0: prefill
  batch.push_back({0, 199, 2, true});
  const auto q = random_queries(cs.sh, batch.size(), rng);
  for (int threads : {1, 2, 3}) {
    Runner r(cs.sh, threads, static_cast<int>(batch.size()));
    for (kernels::Isa isa : kernels::supported_isas()) {
      const auto out = r.run(cache.kv, 1, batch, q, isa);
      const double tol = cs.kv == DType::Q8_0 ? 2e-5 : 1e-5;
      EXPECT_LT(check(cs.sh, cache.kv, 1, batch, q, out), tol) << kernels::isa_name(isa) << " threads " << threads;
    }
  }
}

// A long context with fewer tasks than workers takes the split path.
TEST_P(AttendTiles, LongContextSplitMatchesReference) {
  const Case& cs = GetParam();
  std::mt19937 rng(22);
  Cache cache(cs.sh, cs.kv, 1, 1, 1100);
  cache.fill(cs.sh, rng);
  for (int pos : {kAttnSplitMinPositions - 1, kAttnSplitMinPositions + 5, 1099}) {
    const std::vector<BatchToken> batch = {{0, pos, 0, true}};
    const auto q = random_queries(cs.sh, 1, rng);
    for (int threads : {1, 4, 7}) {
      Runner r(cs.sh, threads, 1);
      const auto out = r.run(cache.kv, 0, batch, q);
      EXPECT_LT(check(cs.sh, cache.kv, 0, batch, q, out), 2e-5) << "pos " << pos << " threads " << threads;
    }
  }
  // Two tokens of a run near the end, split too.
  const std::vector<BatchToken> batch = {{0, 1097, 0, false}, {0, 1098, 0, true}};
  const auto q = random_queries(cs.sh, 2, rng);
  Runner r(cs.sh, 8, 2);
  EXPECT_LT(check(cs.sh, cache.kv, 0, batch, q, r.run(cache.kv, 0, batch, q)), 2e-5);
}

// Without the split, a token's result is the same bits however the batch is
// cut: prefill in one step, one token at a time, or beside other slots.
TEST_P(AttendTiles, ResultsDoNotDependOnBatching) {
  const Case& cs = GetParam();
  std::mt19937 rng(23);
  Cache cache(cs.sh, cs.kv, 2, 1, 160);
  cache.fill(cs.sh, rng);
  std::vector<BatchToken> all;
  for (int p = 0; p < 150; ++p) all.push_back({0, p, 0, false});
  const auto q = random_queries(cs.sh, all.size(), rng);
  const size_t qrow = static_cast<size_t>(cs.sh.n_heads) * cs.sh.head_dim;
  const size_t orow = static_cast<size_t>(cs.sh.n_heads) * cs.sh.head_dim_v;
  Runner r(cs.sh, 2, static_cast<int>(all.size()) + 1);
  const auto whole = r.run(cache.kv, 0, all, q);
  for (int p : {0, 1, 63, 64, 65, 149}) {
    std::vector<BatchToken> one = {{0, 5, 1, true}, all[static_cast<size_t>(p)]};
    std::vector<float> q1 = random_queries(cs.sh, 1, rng);
    q1.insert(q1.end(), q.begin() + static_cast<ptrdiff_t>(p * qrow), q.begin() + static_cast<ptrdiff_t>((p + 1) * qrow));
    const auto out = r.run(cache.kv, 0, one, q1);
    for (size_t c = 0; c < orow; ++c) ASSERT_EQ(out[orow + c], whole[p * orow + c]) << "pos " << p << " c " << c;
  }
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  char name[64];
  std::snprintf(name, sizeof(name), "h%dkv%dd%d_%s", c.sh.n_heads, c.sh.n_kv_heads, c.sh.head_dim,
                std::string(dtype_name(c.kv)).c_str());
  return name;
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttendTiles,
                         ::testing::Values(Case{{4, 4, 64, 64}, DType::F32},     // group 1
                                           Case{{4, 2, 64, 64}, DType::F16},     // group 2
                                           Case{{12, 2, 128, 128}, DType::F16},  // group 6 (Qwen2-1.5B)
                                           Case{{12, 2, 128, 128}, DType::Q8_0},
                                           Case{{14, 2, 64, 64}, DType::Q8_0},   // group 7
                                           Case{{7, 1, 40, 40}, DType::F32},     // group 7, odd width
                                           Case{{8, 4, 8, 8}, DType::F16},       // stories260K-like tiny heads
                                           Case{{70, 1, 32, 32}, DType::F32}),   // group wider than a tile
                         case_name);

}  // namespace
}  // namespace edgelm
