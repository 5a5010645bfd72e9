// Flags shared by the commands that build a memory plan (plan, serve, bench).
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "engine/memory_plan.h"
#include "model/model.h"

namespace edgelm::tools {

struct PlanFlags {
  std::string model;
  int slots = 0;
  int ctx = 0;
  std::string kv_type = "f16";
  std::string budget = "auto";
  double reserve = 0.10;
  int batch = 256;
  int threads = 0;  // 0: physical cores
  std::string attn_math = "f32";  // --attn-math, for the commands that run the engine
  std::string isa = "auto";       // --isa: the kernels' instruction set (auto: the best this CPU has)
};

void add_plan_flags(CLI::App* cmd, PlanFlags& f, bool model_required = true);
// --attn-math and --isa (run, serve, bench: the commands that build an engine).
void add_engine_flags(CLI::App* cmd, PlanFlags& f);
// The instruction set --isa names ("auto": the best this CPU runs); an error
// when this CPU or build lacks it.
Result<kernels::Isa> resolve_isa(const std::string& name);
// Physical cores (what --threads 0 means).
int default_threads();
Result<MemoryPlan> plan_from_flags(const Model& m, const PlanFlags& f, uint64_t extra_bytes = 0);
nlohmann::json plan_to_json(const MemoryPlan& p);

}  // namespace edgelm::tools
