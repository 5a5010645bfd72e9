// Builds engines over synthetic or shared models for the engine tests.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "model/synth.h"
#include "testutil.h"

namespace edgelm::test {

inline std::string synth_model(const std::string& shape, const std::string& ftype) {
  const std::string path = temp_path(shape + "-" + ftype + ".gguf");
  if (std::filesystem::exists(path)) return path;
  SynthOptions o;
  o.shape = shape;
  o.ftype = ftype;
  o.output = path;
  auto r = write_synthetic_model(o);
  EXPECT_TRUE(r.ok()) << r.message();
  return path;
}

// `pinned`: a prefix pinned before the engine starts; `start`: false leaves
// the engine thread unstarted (requests queue and wait); `tune` may change
// any engine option last.
inline std::unique_ptr<Engine> make_engine(const std::string& path, int slots, int ctx,
                                           int threads = 2, DType kv = DType::F16,
                                           int step_tokens = 64, AttnMath attn_math = AttnMath::F32,
                                           double min_step_seconds = 0,
                                           const std::vector<int32_t>& pinned = {},
                                           bool start = true,
                                           const std::function<void(EngineOptions&)>& tune = {}) {
  auto m = Model::load(path);
  EXPECT_TRUE(m.ok()) << m.message();
  if (!m.ok()) return nullptr;
  auto tok = tokenizer::Tokenizer::from_gguf((*m)->file);
  EXPECT_TRUE(tok.ok()) << tok.message();
  if (!tok.ok()) return nullptr;
  PlanOptions po;
  po.slots = slots;
  po.ctx = ctx;
  po.kv_type = kv;
  po.step_tokens = step_tokens;
  po.threads = threads;
  po.pinned_tokens = static_cast<int>(pinned.size());
  auto plan = make_plan((*m)->config, (*m)->weights, po, Budget{1ull << 40, "test"});
  EXPECT_TRUE(plan.ok()) << plan.message();
  EngineOptions eo;
  eo.threads = threads;
  eo.attn_math = attn_math;
  eo.min_step_seconds = min_step_seconds;
  if (const char* isa = std::getenv("EDGELM_TEST_ISA")) {
    for (kernels::Isa i : kernels::supported_isas())
      if (kernels::isa_name(i) == isa) eo.isa = i;
  }
  if (tune) tune(eo);
  auto e = Engine::create(std::move(m).value(), std::move(tok).value(), *plan, eo);
  EXPECT_TRUE(e.ok()) << e.message();
  if (!e.ok()) return nullptr;
  if (!pinned.empty()) {
    const Status st = (*e)->pin_prefix(pinned);
    EXPECT_TRUE(st.ok()) << st.message();
  }
  if (start) (*e)->start();
  return std::move(e).value();
}

// Runs one request to completion on `e`; returns the output tokens.
inline std::vector<int32_t> generate(Engine& e, const std::vector<int32_t>& prompt, const GenerateParams& p,
                                     Finish* fin = nullptr, SlotRef ref = {}) {
  if (!ref.ok()) ref = e.try_acquire();
  const int slot = ref.slot;
  EXPECT_GE(slot, 0);
  EXPECT_TRUE(e.submit(ref, prompt, p).ok());
  std::vector<int32_t> out;
  for (;;) {
    const int n = e.wait_for(slot, static_cast<int>(out.size()), std::chrono::steady_clock::now() + std::chrono::seconds(30));
    while (static_cast<int>(out.size()) < n) out.push_back(e.output_token(slot, static_cast<int>(out.size())));
    if (e.finish(slot) != Finish::None && e.wait_for(slot, static_cast<int>(out.size()), std::chrono::steady_clock::now()) == static_cast<int>(out.size())) break;
  }
  if (fin) *fin = e.finish(slot);
  e.release(ref);
  return out;
}

inline GenerateParams greedy(int n) {
  GenerateParams p;
  p.sampling.temperature = 0;
  p.max_tokens = n;
  return p;
}

}  // namespace edgelm::test
