#include "model/forward.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "core/region.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "model/reference_model.h"
#include "model/synth.h"
#include "testutil.h"

namespace edgelm {
namespace {

std::unique_ptr<Model> synth(const std::string& shape, const std::string& ftype) {
  SynthOptions o;
  o.shape = shape;
  o.ftype = ftype;
  o.output = test::temp_path(shape + "-" + ftype + ".gguf");
  auto r = write_synthetic_model(o);
  EXPECT_TRUE(r.ok()) << r.message();
  auto m = Model::load(o.output);
  EXPECT_TRUE(m.ok()) << m.message();
  return std::move(m).value();
}

// A Forward with its own scratch and an f32 (or other) cache of `slots` x `ctx`.
struct Harness {
  Harness(const Model& m, int slots, int ctx, int max_tokens, DType kv_type, int threads,
          kernels::Isa isa = kernels::best_isa(), AttnMath attn = AttnMath::F32)
      : pool(threads) {
    ScratchSpec spec{max_tokens, slots, threads};
    layout = plan_scratch(m.config, m.weights, spec);
    KvView kv = KvView::make(kv_type, slots, m.config.n_layers, ctx, m.config.n_kv_heads, m.config.head_dim,
                             m.config.head_dim_v);
    mem = Region::map(layout.total + kv.bytes(), "test").value();
    kv.base = mem.data() + layout.total;
    fwd = std::make_unique<Forward>(m.config, m.weights, layout, mem.data(), kv, pool, isa, attn);
  }
  ThreadPool pool;
  ScratchLayout layout;
  Region mem;
  std::unique_ptr<Forward> fwd;
};

double max_rel_diff(const float* a, const std::vector<float>& b) {
  double mx = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    mx = std::max(mx, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return mx / std::max(scale, 1e-9);
}

struct ForwardCase {
  std::string shape, ftype;
  double tol;
};

class ForwardVsReference : public ::testing::TestWithParam<ForwardCase> {};

// Prefill of 7 tokens in one step, then 5 decode steps, against the plain
// reference fed one token at a time.
TEST_P(ForwardVsReference, MatchesPlainImplementation) {
  const ForwardCase& cs = GetParam();
  auto m = synth(cs.shape, cs.ftype);
  Harness h(*m, 1, 64, 16, DType::F32, 2);
  test::ReferenceModel ref(*m);
  const std::vector<int32_t> prompt = {1, 300, 7, 42, 99, 260, 5};
  std::vector<BatchToken> batch;
  for (size_t i = 0; i < prompt.size(); ++i)
    batch.push_back({prompt[i], static_cast<int32_t>(i), 0, i + 1 == prompt.size()});
  auto logits = h.fwd->step(batch);
  ASSERT_TRUE(logits.ok()) << logits.message();
  std::vector<float> want;
  for (int32_t t : prompt) want = ref.feed(t);
  EXPECT_LT(max_rel_diff(*logits, want), cs.tol) << "after prefill";
  int32_t next = 17;
  for (int step = 0; step < 5; ++step) {
    BatchToken b{next, static_cast<int32_t>(prompt.size()) + step, 0, true};
    logits = h.fwd->step({&b, 1});
    ASSERT_TRUE(logits.ok());
    want = ref.feed(next);
    EXPECT_LT(max_rel_diff(*logits, want), cs.tol) << "decode step " << step;
    next = (next * 31 + 7) % m->config.n_vocab;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, ForwardVsReference,
    ::testing::Values(ForwardCase{"tiny-llama", "F32", 1e-4}, ForwardCase{"tiny-qwen2", "F32", 1e-4},
                      ForwardCase{"tiny-qwen3", "F32", 1e-4}, ForwardCase{"tiny-llama", "F16", 1e-3},
                      // The reference rounds activations through the same 8-bit
                      // formats, but sums in another order (and Q4_1/Q5_1 round
                      // the activation sums to f16 as the format does): values
                      // near a rounding boundary land on the other side and the
                      // difference compounds through the layers. A wrong scale,
                      // sign or nibble order gives errors of order 1.
                      ForwardCase{"tiny-qwen2", "Q8_0", 3e-2}, ForwardCase{"tiny-llama", "Q8_0", 3e-2},
                      ForwardCase{"tiny-llama", "Q4_0", 3e-2}, ForwardCase{"tiny-qwen2", "Q4_0", 3e-2},
                      ForwardCase{"tiny-llama", "Q4_1", 3e-2}, ForwardCase{"tiny-qwen2", "Q5_0", 3e-2},
                      ForwardCase{"tiny-llama", "Q5_1", 3e-2}, ForwardCase{"tiny-qwen3", "Q4_K_M", 3e-2},
                      ForwardCase{"tiny-llama", "Q6_K", 3e-2}, ForwardCase{"tiny-qwen2", "Q5_K_M", 3e-2},
                      ForwardCase{"tiny-llama", "Q3_K_M", 3e-2}, ForwardCase{"tiny-qwen3", "Q2_K", 3e-2},
                      ForwardCase{"tiny-narrow", "Q4_K_M", 3e-2},
                      ForwardCase{"tiny-llama", "BF16", 1e-3}),
    [](const auto& param_info) {
      std::string n = param_info.param.shape + "_" + param_info.param.ftype;
      for (char& c : n)
        if (c == '-') c = '_';
      return n;
    });

// Two sequences in one batch (one prefilling, one decoding) produce the same
// logits as each run alone: slots are independent.
TEST(Forward, BatchedSlotsAreIndependent) {
  auto m = synth("tiny-qwen2", "F16");
  Harness both(*m, 2, 64, 16, DType::F16, 2);
  Harness solo(*m, 2, 64, 16, DType::F16, 2);
  // Slot 0: prompt a; slot 1: prompt b.
  const std::vector<int32_t> a = {1, 10, 20, 30}, b = {1, 50, 60};
  std::vector<BatchToken> batch;
  for (size_t i = 0; i < a.size(); ++i) batch.push_back({a[i], static_cast<int32_t>(i), 0, i + 1 == a.size()});
  ASSERT_TRUE(both.fwd->step(batch).ok());
  // Now slot 0 decodes token 77 at pos 4 while slot 1 prefills b.
  batch.clear();
  batch.push_back({77, 4, 0, true});
  for (size_t i = 0; i < b.size(); ++i) batch.push_back({b[i], static_cast<int32_t>(i), 1, i + 1 == b.size()});
  auto mixed = both.fwd->step(batch);
  ASSERT_TRUE(mixed.ok());
  const int V = m->config.n_vocab;
  std::vector<float> mixed0(*mixed, *mixed + V), mixed1(*mixed + V, *mixed + 2 * V);

  batch.clear();
  for (size_t i = 0; i < a.size(); ++i) batch.push_back({a[i], static_cast<int32_t>(i), 0, false});
  batch.push_back({77, 4, 0, true});
  auto alone0 = solo.fwd->step(batch);
  ASSERT_TRUE(alone0.ok());
  EXPECT_LT(max_rel_diff(*alone0, mixed0), 1e-5);
  batch.clear();
  for (size_t i = 0; i < b.size(); ++i) batch.push_back({b[i], static_cast<int32_t>(i), 1, i + 1 == b.size()});
  auto alone1 = solo.fwd->step(batch);
  ASSERT_TRUE(alone1.ok());
  EXPECT_LT(max_rel_diff(*alone1, mixed1), 1e-5);
}

// Chunked prefill equals one-shot prefill, and the q8_0 cache stays close to f16.
TEST(Forward, ChunkedPrefillAndKvTypes) {
  auto m = synth("tiny-llama", "F16");  // float activations: cache rounding is all that differs
  std::vector<int32_t> p;
  for (int i = 0; i < 40; ++i) p.push_back((i * 37 + 3) % m->config.n_vocab);
  auto run = [&](DType kv, int chunk) {
    Harness h(*m, 1, 64, 64, kv, 2);
    std::vector<float> out;
    for (size_t s = 0; s < p.size(); s += static_cast<size_t>(chunk)) {
      std::vector<BatchToken> batch;
      for (size_t i = s; i < std::min(p.size(), s + chunk); ++i)
        batch.push_back({p[i], static_cast<int32_t>(i), 0, i + 1 == p.size()});
      auto l = h.fwd->step(batch);
      EXPECT_TRUE(l.ok());
      if (batch.back().logits) out.assign(*l, *l + m->config.n_vocab);
    }
    return out;
  };
  auto whole = run(DType::F16, 64);
  auto chunked = run(DType::F16, 7);
  EXPECT_LT(max_rel_diff(chunked.data(), whole), 1e-5);
  auto q8 = run(DType::Q8_0, 64);
  EXPECT_LT(max_rel_diff(q8.data(), whole), 2e-2);
  auto f32 = run(DType::F32, 64);
  EXPECT_LT(max_rel_diff(f32.data(), whole), 5e-3);
}

// llama.cpp's attention rounding (AttnMath::LlamaCpp): with an f32 cache
// nothing is rounded, so only the online softmax's grouping differs from the
// default; with f16 and q8_0 caches the query and (f16) running output are
// rounded, which moves the logits a little and no more.
TEST(Forward, LlamaCppAttentionRounding) {
  auto m = synth("tiny-qwen2", "F16");
  std::vector<int32_t> p;
  for (int i = 0; i < 40; ++i) p.push_back((i * 53 + 7) % m->config.n_vocab);
  auto run = [&](DType kv, AttnMath attn) {
    Harness h(*m, 1, 64, 16, kv, 2, kernels::best_isa(), attn);
    std::vector<float> out;
    for (size_t s = 0; s < p.size(); s += 16) {
      std::vector<BatchToken> batch;
      for (size_t i = s; i < std::min(p.size(), s + 16); ++i)
        batch.push_back({p[i], static_cast<int32_t>(i), 0, i + 1 == p.size()});
      auto l = h.fwd->step(batch);
      EXPECT_TRUE(l.ok()) << l.message();
      if (l.ok() && batch.back().logits) out.assign(*l, *l + m->config.n_vocab);
    }
    return out;
  };
  for (DType kv : {DType::F32, DType::F16, DType::Q8_0}) {
    const auto f32 = run(kv, AttnMath::F32);
    const auto llama = run(kv, AttnMath::LlamaCpp);
    ASSERT_EQ(llama.size(), f32.size());
    const double d = max_rel_diff(llama.data(), f32);
    if (kv == DType::F32) {
      EXPECT_LT(d, 1e-5);
    } else {
      EXPECT_GT(d, 0.0) << dtype_name(kv) << ": the query is rounded, so the logits must move";
      EXPECT_LT(d, 2e-2) << dtype_name(kv);
    }
  }
  EXPECT_EQ(parse_attn_math("llamacpp").value(), AttnMath::LlamaCpp);
  EXPECT_EQ(attn_math_name(parse_attn_math("f32").value()), "f32");
  EXPECT_FALSE(parse_attn_math("f16").ok());
}

// Every ISA the machine has gives the same logits as the scalar kernels.
TEST(Forward, IsasAgree) {
  auto m = synth("tiny-qwen3", "Q4_K_M");
  std::vector<BatchToken> batch;
  for (int i = 0; i < 9; ++i) batch.push_back({(i * 13 + 1) % m->config.n_vocab, i, 0, i == 8});
  Harness ref(*m, 1, 32, 16, DType::F16, 1, kernels::Isa::Scalar);
  auto want = ref.fwd->step(batch);
  ASSERT_TRUE(want.ok());
  std::vector<float> w(*want, *want + m->config.n_vocab);
  for (kernels::Isa isa : kernels::supported_isas()) {
    Harness h(*m, 1, 32, 16, DType::F16, 2, isa);
    auto got = h.fwd->step(batch);
    ASSERT_TRUE(got.ok());
    EXPECT_LT(max_rel_diff(*got, w), 1e-3) << kernels::isa_name(isa);
  }
}

// Weights repacked into the interleaved layout (Model::pack_for) give the
// logits of the file's row layout, for every type the machine packs; a tied
// embedding is then read back from the packed copy.
TEST(Forward, PackedWeightsGiveTheRowLayoutsLogits) {
  const kernels::Isa isa = kernels::best_isa();
  int packed_types = 0;
  // tiny-narrow's Q4_K_M mixes Q5_0 and Q8_0 matrices on one input (the
  // quantized activations are shared between them).
  const std::pair<const char*, const char*> files[] = {{"tiny-qwen2", "Q4_0"},   {"tiny-qwen2", "Q8_0"},
                                                       {"tiny-qwen2", "Q4_K_M"}, {"tiny-qwen2", "Q5_K_M"},
                                                       {"tiny-qwen2", "Q6_K"},   {"tiny-narrow", "Q4_K_M"},
                                                       {"tiny-qwen2", "Q4_1"},   {"tiny-qwen2", "Q5_1"}};
  for (const auto& [shape, ftype] : files) {
    auto rows = synth(shape, ftype);
    auto packed = synth(shape, ftype);
    ThreadPool pool(2);
    auto n = packed->pack_for(isa, pool);
    ASSERT_TRUE(n.ok()) << n.message();
    if (*n == 0) continue;  // this ISA has no interleaved kernel for the type
    ++packed_types;
    const TensorView& up = packed->weights.layers[0].w_up;
    EXPECT_EQ(up.layout, kernels::preferred_layout(isa, up.type, up.rows, up.cols)) << shape << " " << ftype;
    std::vector<BatchToken> prefill;
    for (int i = 0; i < 9; ++i) prefill.push_back({(i * 37 + 5) % rows->config.n_vocab, i, 0, i == 8});
    const std::vector<BatchToken> decode = {{11, 9, 0, true}};
    Harness a(*rows, 1, 32, 16, DType::F16, 2, isa), b(*packed, 1, 32, 16, DType::F16, 2, isa);
    for (const std::vector<BatchToken>* batch : {&std::as_const(prefill), &decode}) {
      auto want = a.fwd->step(*batch);
      auto got = b.fwd->step(*batch);
      ASSERT_TRUE(want.ok()) << want.message();
      ASSERT_TRUE(got.ok()) << got.message();
      std::vector<float> w(*want, *want + rows->config.n_vocab);
      // Sums in another order: as in ForwardVsReference, an activation near a
      // rounding boundary of the 8-bit formats may land on the other side and
      // the difference compounds; a wrong nibble, scale or row order gives
      // errors of order 1.
      EXPECT_LT(max_rel_diff(*got, w), 3e-2) << shape << " " << ftype << " at position " << batch->back().pos;
    }
  }
  if (packed_types == 0) GTEST_SKIP() << "no interleaved kernels on " << kernels::isa_name(isa);
}

TEST(Forward, RejectsBadBatches) {
  auto m = synth("tiny-llama", "F16");
  Harness h(*m, 1, 8, 4, DType::F16, 1);
  BatchToken bad_tok{m->config.n_vocab, 0, 0, true};
  EXPECT_FALSE(h.fwd->step({&bad_tok, 1}).ok());
  BatchToken bad_pos{1, 8, 0, true};
  EXPECT_FALSE(h.fwd->step({&bad_pos, 1}).ok());
  BatchToken bad_slot{1, 0, 1, true};
  EXPECT_FALSE(h.fwd->step({&bad_slot, 1}).ok());
  std::vector<BatchToken> too_many(5, BatchToken{1, 0, 0, false});
  EXPECT_FALSE(h.fwd->step(too_many).ok());
  EXPECT_FALSE(h.fwd->step({}).ok());
}

}  // namespace
}  // namespace edgelm
