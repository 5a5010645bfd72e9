// GET /status and GET /slots: what the server is doing, as JSON, for the
// status page (GET /, src/serve/ui/status.html) and for scripts. Built from
// the engine's and the gate's own figures, the memory plan and the ring of
// per-second samples; nothing here is kept between requests.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "serve/admission.h"
#include "serve/metrics.h"
#include "serve/server.h"
#include "serve/status_ring.h"

namespace edgelm::serve {

struct StatusView {
  Engine& engine;  // read only (wait_for with a past deadline only reads a count)
  const Admission& adm;
  const Metrics& metrics;
  const ServerOptions& o;
  const StatusRing& ring;
  std::span<const std::atomic<float>>
      slot_rates;  // tokens/s of each slot's stream over the last second
  double uptime_s = 0;
};

// Each slot: id, state, ctx, prompt/generated/max tokens (while it holds a
// request), cached_tokens, class, tokens_per_s.
std::string slots_json(const StatusView& v);
// Version, model, flags, memory (plan parts, budget, resident, cgroup),
// slots (as slots_json), gate state, and the ring as columns (history).
std::string status_json(const StatusView& v);

// The status page itself (HTML with its CSS and JavaScript), compiled in
// from src/serve/ui/status.html.
std::string_view status_page_html();

}  // namespace edgelm::serve
