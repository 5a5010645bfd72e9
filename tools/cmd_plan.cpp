// edgelm plan: the memory plan for a model, slot count and context.
#include <fmt/core.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "core/bytes.h"
#include "engine/memory_plan.h"
#include "model/model.h"
#include "tools/commands.h"
#include "tools/options.h"

namespace edgelm::tools {

nlohmann::json plan_to_json(const MemoryPlan& p) {
  nlohmann::json j;
  j["fits"] = p.fits();
  j["slots"] = p.slots;
  j["ctx"] = p.ctx;
  j["kv_type"] = std::string(dtype_name(p.kv_type));
  j["step_tokens"] = p.step_tokens;
  j["bytes"] = {{"weights", p.weights},       {"kv", p.kv},       {"scratch", p.scratch},
                {"sampler", p.sampler},       {"slot_state", p.slot_state}, {"extra", p.extra},
                {"total", p.total},           {"budget", p.budget.bytes}};
  j["kv_bytes_per_token"] = p.kv_per_token;
  j["kv_bytes_per_slot"] = p.kv_per_slot;
  j["headroom"] = p.headroom();
  j["budget_source"] = p.budget.source;
  nlohmann::json items = nlohmann::json::array();
  for (const auto& it : p.scratch_layout.items) items.push_back({{"name", std::string(it.name)}, {"bytes", it.bytes}});
  j["scratch_items"] = items;
  if (!p.fits()) {
    j["max_slots_at_ctx"] = p.max_slots_at_ctx;
    j["max_ctx_at_slots"] = p.max_ctx_at_slots;
  }
  return j;
}

void add_plan_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan", "Compute the memory plan (weights + scratch + KV) against a budget");
  auto opts = std::make_shared<PlanFlags>();
  auto json = std::make_shared<bool>(false);
  add_plan_flags(cmd, *opts);
  cmd->add_flag("--json", *json, "Print the plan as JSON");
  cmd->callback([=] {
    auto m = Model::load(opts->model);
    if (!m.ok()) {
      fmt::print(stderr, "error: {}\n", m.message());
      set_exit_code(1);
      return;
    }
    auto plan = plan_from_flags(**m, *opts);
    if (!plan.ok()) {
      fmt::print(stderr, "error: {}\n", plan.message());
      set_exit_code(1);
      return;
    }
    if (*json) fmt::print("{}\n", plan_to_json(*plan).dump(2));
    else fmt::print("{}", format_plan(*plan));
    set_exit_code(plan->fits() ? 0 : 2);
  });
}

}  // namespace edgelm::tools
