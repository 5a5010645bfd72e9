#include "serve/metrics.h"

#include <fmt/format.h>

#include "core/sysmem.h"

namespace edgelm::serve {

void Histogram::observe(double s) {
  size_t i = 0;
  while (i < kBuckets && s > kBounds[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_us_.fetch_add(static_cast<uint64_t>(s * 1e6), std::memory_order_relaxed);
  n_.fetch_add(1, std::memory_order_relaxed);
}

void Histogram::render(std::string& out, const char* name, const char* help) const {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cum = 0;
  for (int i = 0; i < kBuckets; ++i) {
    cum += counts_[static_cast<size_t>(i)].load(std::memory_order_relaxed);
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, kBounds[static_cast<size_t>(i)], cum);
  }
  cum += counts_[kBuckets].load(std::memory_order_relaxed);
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, cum);
  out += fmt::format("{}_sum {}\n{}_count {}\n", name, static_cast<double>(sum_us_.load()) / 1e6, name, n_.load());
}

Histogram::Counts Histogram::counts() const {
  Counts c{};
  for (size_t i = 0; i < c.size(); ++i) c[i] = counts_[i].load(std::memory_order_relaxed);
  return c;
}

void Metrics::count_status(int status) {
  for (size_t i = 0; i < kStatuses.size(); ++i) {
    if (kStatuses[i] == status) {
      by_status[i].fetch_add(1);
      return;
    }
  }
  by_status[kStatuses.size()].fetch_add(1);
}

void Metrics::count_end(std::string_view end) {
  for (size_t i = 0; i < kEnds.size(); ++i)
    if (end == kEnds[i]) ends[i].fetch_add(1);
}

std::string render_metrics(const Metrics& m, const Engine& e, const Admission& a, int open_connections) {
  std::string o;
  auto gauge = [&](const char* name, const char* help, double v) {
    o += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, v);
  };
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    o += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
  };
  const EngineStats st = e.stats();
  const MemoryPlan& p = e.plan();
  gauge("edgelm_slots_total", "Slots allocated at start-up.", e.n_slots());
  gauge("edgelm_slots_busy", "Slots holding a request.", st.active);
  gauge("edgelm_queue_depth", "Requests waiting for a slot.", a.queued());
  gauge("edgelm_ttft_margin",
        "What the gate multiplies a first-token prediction by before holding it to the promise: the largest "
        "measured/predicted ratio of recent requests, within --ttft-margin-max.",
        a.ttft_margin());
  gauge("edgelm_draining", "1 after SIGTERM while running requests finish.", a.draining() ? 1 : 0);
  gauge("edgelm_memory_pressure", "1 while the cgroup or system reports memory pressure.", a.memory_pressure() ? 1 : 0);
  gauge("edgelm_open_connections", "HTTP connections being served.", open_connections);

  o += "# HELP edgelm_requests_total Requests by final HTTP status.\n# TYPE edgelm_requests_total counter\n";
  for (size_t i = 0; i < Metrics::kStatuses.size(); ++i)
    o += fmt::format("edgelm_requests_total{{status=\"{}\"}} {}\n", Metrics::kStatuses[i], m.by_status[i].load());
  o += fmt::format("edgelm_requests_total{{status=\"other\"}} {}\n", m.by_status[Metrics::kStatuses.size()].load());
  o += "# HELP edgelm_request_ends_total Admitted requests by how they ended.\n# TYPE edgelm_request_ends_total counter\n";
  for (size_t i = 0; i < Metrics::kEnds.size(); ++i)
    o += fmt::format("edgelm_request_ends_total{{end=\"{}\"}} {}\n", Metrics::kEnds[i], m.ends[i].load());
  o += "# HELP edgelm_class_requests_total Requests decided by the gate, by priority class and result.\n"
       "# TYPE edgelm_class_requests_total counter\n";
  for (size_t c = 0; c < a.options().classes.size(); ++c) {
    const std::string& name = a.options().classes[c].name;
    o += fmt::format("edgelm_class_requests_total{{class=\"{}\",result=\"admitted\"}} {}\n", name, a.admitted(static_cast<int>(c)));
    o += fmt::format("edgelm_class_requests_total{{class=\"{}\",result=\"refused\"}} {}\n", name, a.refused(static_cast<int>(c)));
  }
  o += "# HELP edgelm_rejections_total Requests refused at admission, by reason.\n"
       "# TYPE edgelm_rejections_total counter\n";
  for (int r = 1; r < kReasonCount; ++r)
    o += fmt::format("edgelm_rejections_total{{reason=\"{}\"}} {}\n", reason_name(static_cast<Reason>(r)),
                     m.rejections[static_cast<size_t>(r)].load());
  counter("edgelm_prompt_tokens_total", "Prompt tokens admitted.", m.prompt_tokens.load());
  counter("edgelm_prompt_tokens_dropped_total", "Prompt tokens removed by truncation.", m.prompt_tokens_dropped.load());
  counter("edgelm_prompt_tokens_reused_total", "Prompt tokens taken from a slot's cached prefix instead of computed.",
          m.prompt_tokens_reused.load());
  {
    // Reused first: it is added after the total, so this order never wraps.
    const uint64_t reused = m.prompt_tokens_reused.load();
    const uint64_t total = m.prompt_tokens.load();
    counter("edgelm_prompt_tokens_computed_total", "Prompt tokens prefilled.", total > reused ? total - reused : 0);
  }
  counter("edgelm_generated_tokens_total", "Tokens generated and sent.", m.generated_tokens.load());
  counter("edgelm_client_disconnects_total", "Requests whose client went away before the end.", m.client_disconnects.load());
  counter("edgelm_connections_refused_total", "Connections refused over the connection cap.", m.connections_refused.load());
  counter("edgelm_engine_steps_total", "Forward steps run.", st.steps);
  gauge("edgelm_decode_tokens_per_second", "Smoothed tokens/s each stream gets in decode steps.", st.decode_rate);
  gauge("edgelm_prefill_tokens_per_second", "Smoothed prompt tokens/s in prefill steps.", st.prefill_rate);
  gauge("edgelm_step_fixed_seconds", "Fitted fixed cost of a step (a in a + b * tokens).", st.step_model.a);
  gauge("edgelm_step_per_token_seconds", "Fitted cost per token in a step (b in a + b * tokens).", st.step_model.b);
  gauge("edgelm_idle_step_fixed_seconds",
        "The same fit over the steps taken with at most one slot busy: the promises' yardstick.", st.idle_model.a);
  gauge("edgelm_idle_step_per_token_seconds", "Cost per token of that fit.", st.idle_model.b);
  m.ttft.render(o, "edgelm_time_to_first_token_seconds", "Time from request to first generated token.");
  m.predicted_ttft.render(o, "edgelm_predicted_time_to_first_token_seconds",
                          "The gate's predicted time to first token of each admitted request.");
  m.tpot.render(o, "edgelm_time_per_output_token_seconds", "Mean time between generated tokens of a request.");
  m.request_seconds.render(o, "edgelm_request_duration_seconds", "Time from request to last byte, admitted requests.");
  m.rejection_seconds.render(o, "edgelm_rejection_duration_seconds", "Time to answer a refused request.");
  o += "# HELP edgelm_memory_reserved_bytes Memory the plan reserved at start-up, by kind.\n"
       "# TYPE edgelm_memory_reserved_bytes gauge\n";
  o += fmt::format("edgelm_memory_reserved_bytes{{kind=\"weights\"}} {}\n", p.weights);
  o += fmt::format("edgelm_memory_reserved_bytes{{kind=\"kv\"}} {}\n", p.kv);
  o += fmt::format("edgelm_memory_reserved_bytes{{kind=\"scratch\"}} {}\n", p.scratch);
  o += fmt::format("edgelm_memory_reserved_bytes{{kind=\"pinned\"}} {}\n", p.pinned);
  o += fmt::format("edgelm_memory_reserved_bytes{{kind=\"other\"}} {}\n", p.sampler + p.slot_state + p.extra);
  o += fmt::format("edgelm_memory_reserved_bytes{{kind=\"process\"}} {}\n", p.baseline);
  gauge("edgelm_pinned_prefix_tokens", "Tokens of the pinned system prompt (--system-prompt-file) whose KV is kept.",
        static_cast<double>(e.pinned_tokens()));
  gauge("edgelm_memory_budget_bytes", "The hard memory budget the plan was held against.", static_cast<double>(p.budget.bytes));
  gauge("edgelm_resident_memory_bytes", "Resident set size of the process.", static_cast<double>(current_rss_bytes()));
  return o;
}

}  // namespace edgelm::serve
