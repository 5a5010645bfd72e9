// Flags shared by the commands that build a memory plan (plan, serve, bench).
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "engine/memory_plan.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

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
  // --system-prompt-file (plan, serve): the system prompt whose KV is pinned;
  // rendered with --chat-template / --chat-template-file (serve) or the
  // model's own template.
  std::string system_prompt_file;
  std::string chat_template, chat_template_file;
  int pinned_tokens = 0;  // its length in tokens, once computed
};

void add_plan_flags(CLI::App* cmd, PlanFlags& f, bool model_required = true);
// --attn-math and --isa (run, serve, bench: the commands that build an engine).
void add_engine_flags(CLI::App* cmd, PlanFlags& f);
// --system-prompt-file, and with `template_flags` the --chat-template and
// --chat-template-file it is rendered with (serve has its own).
void add_system_prompt_flags(CLI::App* cmd, PlanFlags& f, bool template_flags);
// The pinned prefix's tokens for --system-prompt-file (none without it): an
// error when the file cannot be read, the model has no chat template, or
// the template raises.
Result<std::vector<int32_t>> pinned_prefix_from_flags(const tokenizer::Tokenizer& tok, const PlanFlags& f);
// The instruction set --isa names ("auto": the best this CPU runs); an error
// when this CPU or build lacks it.
Result<kernels::Isa> resolve_isa(const std::string& name);
// Physical cores (what --threads 0 means).
int default_threads();
Result<MemoryPlan> plan_from_flags(const Model& m, const PlanFlags& f, uint64_t extra_bytes = 0);
nlohmann::json plan_to_json(const MemoryPlan& p);

}  // namespace edgelm::tools
