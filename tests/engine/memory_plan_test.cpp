#include "engine/memory_plan.h"

#include <gtest/gtest.h>

#include "core/bytes.h"
#include "model/shapes.h"

namespace edgelm {
namespace {

struct Planned {
  ModelConfig config;
  std::vector<TensorPlan> tensors;
  std::vector<gguf::TensorInfo> infos;
  ModelWeights weights;
};

Planned planned(std::string_view shape, std::string_view ftype) {
  Planned p;
  p.config = config_from_shape(find_shape(shape).value());
  p.tensors = tensor_plan(p.config, ftype).value();
  p.infos = tensor_infos(p.tensors);
  auto w = plan_weights(p.config, p.infos);
  EXPECT_TRUE(w.ok()) << w.message();
  p.weights = std::move(w).value();
  return p;
}

Budget budget(uint64_t bytes) { return Budget{bytes, "test"}; }

TEST(MemoryPlan, KvBytesPerTokenMatchesTheMission) {
  auto p = planned("qwen2-1.5b", "Q4_0");
  // 2 x 28 layers x 2 KV heads x 128 dims x 2 bytes
  EXPECT_EQ(kv_bytes_per_token(p.config, DType::F16), 28672u);
  EXPECT_EQ(kv_bytes_per_token(p.config, DType::F32), 57344u);
  // q8_0: 34 bytes per 32 elements
  EXPECT_EQ(kv_bytes_per_token(p.config, DType::Q8_0), 2u * 28 * (256 / 32) * 34);
}

TEST(MemoryPlan, KvTotalsMatchTheMission) {
  auto p = planned("qwen2-1.5b", "Q4_0");
  PlanOptions o;
  o.slots = 4;
  o.ctx = 2048;
  auto plan = make_plan(p.config, p.weights, o, budget(64 * kGiB)).value();
  EXPECT_EQ(plan.kv, 224 * kMiB);
  o.slots = 10;
  o.ctx = 4096;
  plan = make_plan(p.config, p.weights, o, budget(64 * kGiB)).value();
  EXPECT_EQ(plan.kv, 1120 * kMiB);
  EXPECT_EQ(plan.kv_per_slot, 28672u * 4096);
}

TEST(MemoryPlan, WeightsAreTheTensorBytes) {
  auto p = planned("qwen2-1.5b", "Q4_0");
  uint64_t sum = 0;
  for (const auto& t : p.infos) sum += t.nbytes;
  EXPECT_EQ(p.weights.bytes(), sum);
  // The 0.93 GB Q4_0 file of the mission (Q6_K tied embedding).
  EXPECT_NEAR(static_cast<double>(sum) / 1e9, 0.93, 0.02);
}

TEST(MemoryPlan, ScratchIsTheLayoutAndGrowsWithTheStep) {
  auto p = planned("qwen2-1.5b", "Q4_0");
  PlanOptions o;
  o.slots = 4;
  o.ctx = 2048;
  o.step_tokens = 64;
  auto small = make_plan(p.config, p.weights, o, budget(64 * kGiB)).value();
  o.step_tokens = 512;
  auto big = make_plan(p.config, p.weights, o, budget(64 * kGiB)).value();
  EXPECT_EQ(small.scratch, small.scratch_layout.total);
  EXPECT_GT(big.scratch, small.scratch);
  // Residual stream alone: 512 tokens x 1536 floats.
  EXPECT_GE(big.scratch, 512u * 1536 * 4);
  EXPECT_EQ(big.total, big.weights + big.kv + big.scratch + big.sampler + big.slot_state + big.extra + big.baseline);
}

TEST(MemoryPlan, PicksTheLargestSlotCountThatFits) {
  auto p = planned("qwen2-1.5b", "Q4_0");
  PlanOptions o;
  o.ctx = 2048;
  o.slots = 6;
  const uint64_t six = make_plan(p.config, p.weights, o, budget(64 * kGiB))->total;
  o.slots = 7;
  const uint64_t seven = make_plan(p.config, p.weights, o, budget(64 * kGiB))->total;
  // Each slot costs its KV and state, plus a row of logits in the scratch.
  EXPECT_GT(seven - six, 28672u * 2048 + slot_state_bytes(2048));
  o.slots = 0;
  auto plan = make_plan(p.config, p.weights, o, budget(six)).value();
  EXPECT_TRUE(plan.fits());
  EXPECT_EQ(plan.slots, 6);
  EXPECT_EQ(plan.total, six);
  plan = make_plan(p.config, p.weights, o, budget(seven - 1)).value();
  EXPECT_EQ(plan.slots, 6);
  plan = make_plan(p.config, p.weights, o, budget(seven)).value();
  EXPECT_EQ(plan.slots, 7);
}

TEST(MemoryPlan, OverBudgetSaysWhatWouldFit) {
  auto p = planned("qwen2-1.5b", "Q4_0");
  PlanOptions o;
  o.slots = 10;
  o.ctx = 4096;
  auto plan = make_plan(p.config, p.weights, o, budget(3 * kGiB / 2)).value();
  EXPECT_FALSE(plan.fits());
  EXPECT_GT(plan.max_slots_at_ctx, 0);
  EXPECT_LT(plan.max_slots_at_ctx, 10);
  EXPECT_GT(plan.max_ctx_at_slots, 0);
  EXPECT_LT(plan.max_ctx_at_slots, 4096);
  // The suggestions really fit, and one more does not.
  o.slots = plan.max_slots_at_ctx;
  EXPECT_TRUE(make_plan(p.config, p.weights, o, budget(3 * kGiB / 2))->fits());
  o.slots = plan.max_slots_at_ctx + 1;
  EXPECT_FALSE(make_plan(p.config, p.weights, o, budget(3 * kGiB / 2))->fits());
  o.slots = 10;
  o.ctx = plan.max_ctx_at_slots;
  EXPECT_TRUE(make_plan(p.config, p.weights, o, budget(3 * kGiB / 2))->fits());
  o.ctx = plan.max_ctx_at_slots + 1;
  EXPECT_FALSE(make_plan(p.config, p.weights, o, budget(3 * kGiB / 2))->fits());
  std::string text = format_plan(plan);
  EXPECT_NE(text.find("DOES NOT FIT"), std::string::npos);
  EXPECT_NE(text.find("--slots " + std::to_string(plan.max_slots_at_ctx)), std::string::npos);
}

TEST(MemoryPlan, WeightsAloneOverBudgetSuggestNothing) {
  auto p = planned("qwen2-1.5b", "Q8_0");
  PlanOptions o;
  o.slots = 2;
  auto plan = make_plan(p.config, p.weights, o, budget(512 * kMiB)).value();
  EXPECT_FALSE(plan.fits());
  EXPECT_EQ(plan.max_slots_at_ctx, 0);
  EXPECT_EQ(plan.max_ctx_at_slots, 0);
}

TEST(MemoryPlan, Q8KvHalvesTheCache) {
  auto p = planned("qwen2-1.5b", "Q4_0");
  PlanOptions o;
  o.slots = 4;
  o.ctx = 2048;
  o.kv_type = DType::F16;
  auto f16 = make_plan(p.config, p.weights, o, budget(64 * kGiB)).value();
  o.kv_type = DType::Q8_0;
  auto q8 = make_plan(p.config, p.weights, o, budget(64 * kGiB)).value();
  EXPECT_LT(q8.kv, f16.kv * 55 / 100);
}

// Each KV head is a row of its own in the cache: with q8_0, a head of 80
// (4 x 80 = 320, a multiple of 32 in total) still does not fill whole blocks.
TEST(MemoryPlan, Q8KvNeedsWholeBlocksPerHead) {
  auto p = planned("qwen2-1.5b", "Q4_0");
  PlanOptions o;
  o.slots = 1;
  o.ctx = 64;
  o.kv_type = DType::Q8_0;
  EXPECT_TRUE(make_plan(p.config, p.weights, o, budget(64 * kGiB)).ok());
  p.config.head_dim = p.config.head_dim_v = 80;
  p.config.n_kv_heads = 4;
  auto r = make_plan(p.config, p.weights, o, budget(64 * kGiB));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("multiples of 32"), std::string::npos) << r.message();
  o.kv_type = DType::F16;
  EXPECT_TRUE(make_plan(p.config, p.weights, o, budget(64 * kGiB)).ok());
}

TEST(MemoryPlan, RejectsBadOptions) {
  auto p = planned("tiny-llama", "F16");
  PlanOptions o;
  o.slots = -1;
  EXPECT_FALSE(make_plan(p.config, p.weights, o, budget(kGiB)).ok());
  o.slots = 1;
  o.step_tokens = 0;
  EXPECT_FALSE(make_plan(p.config, p.weights, o, budget(kGiB)).ok());
  EXPECT_FALSE(parse_kv_type("q4").ok());
}

TEST(Budget, AutoUsesTheSmallerOfCgroupAndMemAvailable) {
  SystemMemory sys;
  sys.mem_available = 8 * kGiB;
  auto b = resolve_budget("auto", 0.10, sys).value();
  EXPECT_EQ(b.bytes, static_cast<uint64_t>(8.0 * kGiB * 0.9));
  sys.cgroup_version = 2;
  sys.cgroup_limit = 2 * kGiB;
  sys.cgroup_usage = 0;
  b = resolve_budget("auto", 0.10, sys).value();
  EXPECT_EQ(b.bytes, static_cast<uint64_t>(2.0 * kGiB * 0.9));
  // Memory in use counts against the limit, page cache (a mapped model) does not.
  sys.cgroup_usage = kGiB;
  sys.cgroup_file = 768 * kMiB;
  b = resolve_budget("auto", 0.10, sys).value();
  EXPECT_EQ(b.bytes, static_cast<uint64_t>((2.0 * kGiB - 256.0 * kMiB) * 0.9));
  EXPECT_NE(b.source.find("cgroup"), std::string::npos);
  b = resolve_budget("3GiB", 0.10, sys).value();
  EXPECT_EQ(b.bytes, 3 * kGiB);
  EXPECT_FALSE(resolve_budget("lots", 0.1, sys).ok());
  EXPECT_FALSE(resolve_budget("auto", 1.5, sys).ok());
}

}  // namespace
}  // namespace edgelm
