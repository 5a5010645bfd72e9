// edgelm plan: the memory plan for a model, slot count and context.
#include <fmt/core.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "core/bytes.h"
#include "engine/memory_plan.h"
#include "model/model.h"
#include "serve/server.h"
#include "tools/commands.h"
#include "tokenizer/tokenizer.h"
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
                {"sampler", p.sampler},       {"slot_state", p.slot_state}, {"pinned", p.pinned}, {"extra", p.extra},
                {"process", p.baseline},
                {"total", p.total},           {"budget", p.budget.bytes}};
  j["kv_bytes_per_token"] = p.kv_per_token;
  j["kv_bytes_per_slot"] = p.kv_per_slot;
  j["pinned_tokens"] = p.pinned_tokens;
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

namespace {

// systemd's memory limits for `edgelm serve` with this plan, as a drop-in.
// The plan counts what edgelm allocates; the process also maps its binary and
// shared libraries, thread stacks and the allocator's own slack (about 11 MiB
// resident for the tiny test model, little of it growing with the model), so
// each limit is a fraction of the total plus a fixed allowance:
//   MemoryHigh = total + 5% + 32 MiB: normal serving stays under it. Above it
//     the kernel reclaims and throttles the service; edgelm sees that as
//     memory pressure (PSI) and answers 503, so a load balancer sends work to
//     other nodes instead of the board swapping weights in and out.
//   MemoryMax = total + 15% + 64 MiB: the hard wall (OOM kill, then
//     Restart=on-failure). The gap keeps 'auto' budgets working inside the
//     cgroup: the budget is (MemoryMax - usage) less the 10% reserve, still
//     above the total, and the working set stays under the 95% of the limit
//     at which edgelm itself reports pressure.
std::string systemd_dropin(const MemoryPlan& p) {
  constexpr uint64_t MiB = 1 << 20;
  auto limit = [&](double fraction, uint64_t fixed) {
    const auto bytes =
        static_cast<uint64_t>(static_cast<double>(p.total) * (1.0 + fraction)) + fixed;
    return (bytes + MiB - 1) / MiB;  // whole MiB, rounded up
  };
  std::string o;
  o += fmt::format("# edgelm plan: {}\n", plan_one_line(p));
  o += "# MemoryHigh = total + 5% + 32 MiB (reclaim and throttle above; edgelm then answers 503)\n";
  o += "# MemoryMax  = total + 15% + 64 MiB (hard limit: OOM kill, then Restart=on-failure)\n";
  o += fmt::format("# Serve with the same slots ({}) and ctx ({}) in /etc/edgelm/edgelm.toml.\n",
                   p.slots, p.ctx);
  o += "# Save as /etc/systemd/system/edgelm.service.d/memory.conf; systemctl daemon-reload\n";
  o += "[Service]\n";
  o += fmt::format("MemoryHigh={}M\n", limit(0.05, 32 * MiB));
  o += fmt::format("MemoryMax={}M\n", limit(0.15, 64 * MiB));
  // Swapped-out KV cache or scratch would make the plan's "resident" a lie.
  o += "MemorySwapMax=0\n";
  return o;
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan", "Compute the memory plan (weights + scratch + KV) against a budget");
  auto opts = std::make_shared<PlanFlags>();
  auto json = std::make_shared<bool>(false);
  add_plan_flags(cmd, *opts);
  add_system_prompt_flags(cmd, *opts, true);
  auto* json_opt = cmd->add_flag("--json", *json, "Print the plan as JSON");
  auto systemd = std::make_shared<bool>(false);
  cmd->add_flag("--systemd", *systemd,
                "Print MemoryHigh=/MemoryMax= for edgelm.service (a drop-in), from the plan "
                "edgelm serve makes (HTTP buffers included)")
      ->excludes(json_opt);
  cmd->callback([=] {
    auto m = Model::load(opts->model);
    if (!m.ok()) {
      fmt::print(stderr, "error: {}\n", m.message());
      set_exit_code(1);
      return;
    }
    // --systemd: the plan edgelm serve makes, which also holds its HTTP
    // buffers (sized for the default HTTP options).
    const uint64_t extra = *systemd ? serve::server_buffer_bytes(serve::ServerOptions{},
                                                                 opts->slots > 0 ? opts->slots : 64)
                                    : 0;
    // The tokenizer's tables are part of the process the plan measures, as in serve.
    auto tok = tokenizer::Tokenizer::from_gguf((*m)->file);
    if (!tok.ok()) {
      fmt::print(stderr, "error: {}\n", tok.message());
      set_exit_code(1);
      return;
    }
    auto pinned = pinned_prefix_from_flags(*tok, *opts);
    if (!pinned.ok()) {
      fmt::print(stderr, "error: {}\n", pinned.message());
      set_exit_code(1);
      return;
    }
    opts->pinned_tokens = static_cast<int>(pinned->size());
    auto plan = plan_from_flags(**m, *opts, extra);
    if (!plan.ok()) {
      fmt::print(stderr, "error: {}\n", plan.message());
      set_exit_code(1);
      return;
    }
    if (*systemd) {
      fmt::print("{}", systemd_dropin(*plan));
      if (!plan->fits())
        fmt::print(
            stderr,
            "warning: the plan does not fit this machine's budget ({}); the limits are for a board "
            "where it does\n",
            plan->budget.source);
    } else if (*json)
      fmt::print("{}\n", plan_to_json(*plan).dump(2));
    else
      fmt::print("{}", format_plan(*plan));
    set_exit_code(plan->fits() ? 0 : 2);
  });
}

}  // namespace edgelm::tools
