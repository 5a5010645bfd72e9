#include "serve/status.h"

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/sysmem.h"
#include "kernels/kernels.h"

#ifndef EDGELM_VERSION
#define EDGELM_VERSION "unknown"
#endif

namespace edgelm::serve {

using json = nlohmann::json;

namespace {

json slot_array(const StatusView& v) {
  static const char* names[] = {"free", "reserved", "queued", "prefill", "decode", "finished"};
  Engine& e = v.engine;
  json arr = json::array();
  for (int i = 0; i < e.n_slots(); ++i) {
    const auto st = e.state(i);
    json j = {{"id", i}, {"state", names[static_cast<int>(st)]}, {"ctx", e.ctx()}};
    if (st != Engine::SlotState::Free && st != Engine::SlotState::Reserved) {
      j["prompt_tokens"] = e.prompt_tokens(i);
      j["generated_tokens"] = e.wait_for(i, 1 << 30, std::chrono::steady_clock::now());
      j["max_tokens"] = e.max_tokens(i);
    }
    j["cached_tokens"] = e.cached_tokens(i);
    if (const int c = v.adm.slot_class(i); c >= 0)
      j["class"] = v.adm.options().classes[static_cast<size_t>(c)].name;
    if (static_cast<size_t>(i) < v.slot_rates.size()) {
      const float r = v.slot_rates[static_cast<size_t>(i)].load(std::memory_order_relaxed);
      j["tokens_per_s"] = std::round(r * 10) / 10;
    }
    arr.push_back(std::move(j));
  }
  return arr;
}

json opt(const std::optional<uint64_t>& x) {
  return x ? json(*x) : json(nullptr);
}

// A figure of the ring: rounded to what a chart can show, null for "none".
json figure(float x) {
  return x < 0 ? json(nullptr) : json(std::round(static_cast<double>(x) * 1e4) / 1e4);
}

}  // namespace

std::string slots_json(const StatusView& v) {
  return slot_array(v).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string status_json(const StatusView& v) {
  const Engine& e = v.engine;
  const MemoryPlan& p = e.plan();
  const ModelConfig& c = e.model().config;
  const AdmissionOptions& ao = v.adm.options();
  json j;
  j["version"] = EDGELM_VERSION;
  j["uptime_s"] = std::floor(v.uptime_s);
  j["model"] = {{"id", v.o.model_id},        {"name", c.name},   {"arch", c.arch_name},
                {"layers", c.n_layers},      {"embd", c.n_embd}, {"vocab", c.n_vocab},
                {"ctx_train", c.n_ctx_train}};

  json classes = json::array();
  for (const ClassSpec& cs : ao.classes)
    classes.push_back({{"name", cs.name}, {"reserved", cs.reserved}});
  const EngineOptions& eo = e.options();
  j["flags"] = {{"slots", p.slots},
                {"ctx", p.ctx},
                {"kv_type", dtype_name(p.kv_type)},
                {"threads", eo.threads},
                {"isa", kernels::isa_name(eo.isa)},
                {"queue", ao.queue},
                {"min_stream_rate", ao.min_stream_rate},
                {"max_slowdown", ao.max_slowdown},
                {"max_ttft_slowdown", ao.max_ttft_slowdown},
                {"max_ttft", ao.max_ttft_s},
                {"classes", classes},
                {"default_class", v.o.default_class},
                {"preempt", ao.preempt},
                {"prompt_cache", v.o.prompt_cache},
                {"pinned_tokens", v.engine.pinned_tokens()},
                {"api_key", !v.o.api_key.empty() || !v.o.api_key_classes.empty()},
                {"mlock", eo.mlock}};

  // The plan's parts as /metrics' edgelm_memory_reserved_bytes reports
  // them (they sum to the total); the pinned prefix is the system prompt's
  // KV (--system-prompt-file).
  json parts = json::array();
  auto part = [&](const char* kind, uint64_t bytes) {
    parts.push_back({{"kind", kind}, {"bytes", bytes}});
  };
  part("weights", p.weights);
  part("kv", p.kv);
  part("scratch", p.scratch);
  part("pinned_prefix", p.pinned);
  part("other", p.sampler + p.slot_state + p.extra);
  part("process", p.baseline);
  const SystemMemory sys = read_system_memory();
  j["memory"] = {{"plan", {{"parts", parts}, {"total", p.total}}},
                 {"budget", {{"bytes", p.budget.bytes}, {"source", p.budget.source}}},
                 {"resident", current_rss_bytes()},
                 {"peak_resident", peak_rss_bytes()},
                 {"cgroup",
                  {{"limit", opt(sys.cgroup_limit)},
                   {"usage", opt(sys.cgroup_usage)},
                   {"working_set", opt(sys.cgroup_working_set)}}},
                 {"available", sys.mem_available}};

  j["slots"] = slot_array(v);
  const EngineStats st = e.stats();
  j["gate"] = {{"busy", st.active},
               {"queued", v.adm.queued()},
               {"draining", v.adm.draining()},
               {"memory_pressure", v.adm.memory_pressure()},
               {"decode_tokens_per_s", std::round(st.decode_rate * 10) / 10}};

  // Since start: requests admitted, refusals by reason.
  uint64_t admitted = 0;
  for (size_t cl = 0; cl < ao.classes.size(); ++cl)
    admitted += v.adm.admitted(static_cast<int>(cl));
  json refused = json::object();
  for (int r = 1; r < kReasonCount; ++r)
    refused[std::string(reason_name(static_cast<Reason>(r)))] =
        v.metrics.rejections[static_cast<size_t>(r)].load();
  json by_class = json::array();
  for (size_t cl = 0; cl < ao.classes.size(); ++cl)
    by_class.push_back({{"class", ao.classes[cl].name},
                        {"admitted", v.adm.admitted(static_cast<int>(cl))},
                        {"refused", v.adm.refused(static_cast<int>(cl))}});
  j["totals"] = {{"admitted", admitted},
                 {"refused", refused},
                 {"classes", by_class},
                 {"generated_tokens", st.generated_tokens},
                 {"prompt_tokens_reused", v.metrics.prompt_tokens_reused.load()}};

  // The ring as columns, oldest first.
  json h_t = json::array(), h_tok = json::array(), h_prompt = json::array(), h_busy = json::array(),
       h_queued = json::array(), h_adm = json::array();
  std::array<json, kReasonCount> h_ref;
  for (auto& a : h_ref) a = json::array();
  std::array<json, 3> h_ttft, h_tpot;
  for (auto& a : h_ttft) a = json::array();
  for (auto& a : h_tpot) a = json::array();
  v.ring.for_each([&](const StatusSample& s) {
    h_t.push_back(s.t);
    h_tok.push_back(std::round(s.tokens_per_s * 10) / 10);
    h_prompt.push_back(std::round(s.prompt_per_s * 10) / 10);
    h_busy.push_back(s.busy);
    h_queued.push_back(s.queued);
    h_adm.push_back(s.admitted);
    for (int r = 1; r < kReasonCount; ++r)
      h_ref[static_cast<size_t>(r)].push_back(s.refused[static_cast<size_t>(r)]);
    for (size_t q = 0; q < 3; ++q) {
      h_ttft[q].push_back(figure(s.ttft[q]));
      h_tpot[q].push_back(figure(s.tpot[q]));
    }
  });
  json h_refused = json::object();
  for (int r = 1; r < kReasonCount; ++r)
    h_refused[std::string(reason_name(static_cast<Reason>(r)))] =
        std::move(h_ref[static_cast<size_t>(r)]);
  j["history"] = {{"capacity_s", v.ring.capacity()},
                  {"window_s", StatusRing::kWindow},
                  {"t", std::move(h_t)},
                  {"tokens_per_s", std::move(h_tok)},
                  {"prompt_per_s", std::move(h_prompt)},
                  {"busy", std::move(h_busy)},
                  {"queued", std::move(h_queued)},
                  {"admitted", std::move(h_adm)},
                  {"refused", std::move(h_refused)},
                  {"ttft",
                   {{"p50", std::move(h_ttft[0])},
                    {"p90", std::move(h_ttft[1])},
                    {"p99", std::move(h_ttft[2])}}},
                  {"tpot",
                   {{"p50", std::move(h_tpot[0])},
                    {"p90", std::move(h_tpot[1])},
                    {"p99", std::move(h_tpot[2])}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace edgelm::serve
