#include "serve/admission.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

namespace edgelm::serve {

std::string_view reason_name(Reason r) {
  switch (r) {
    case Reason::None: return "none";
    case Reason::Slots: return "slots";
    case Reason::Throughput: return "throughput";
    case Reason::MemoryPressure: return "memory_pressure";
    case Reason::Draining: return "draining";
    case Reason::PromptTooLong: return "prompt_too_long";
    case Reason::Loading: return "loading";
  }
  return "?";
}

double predicted_stream_rate(const StepModel& m, int streams) {
  const double t = m.predict(std::max(streams, 1));
  return t > 0 ? 1.0 / t : 1e9;
}

double stream_rate_floor(const AdmissionOptions& o, const StepModel& m) {
  double floor = o.min_stream_rate;
  if (o.max_slowdown > 0 && m.predict(1) > 0) floor = std::max(floor, predicted_stream_rate(m, 1) / o.max_slowdown);
  return floor;
}

void keep_promise(const AdmissionOptions& o, EngineOptions& eo) {
  eo.max_step_seconds = o.min_stream_rate > 0 ? 1.0 / o.min_stream_rate : 0.5;
  eo.max_slowdown = o.max_slowdown;
}

int retry_after_seconds(int min_remaining_tokens, double per_stream_rate) {
  if (per_stream_rate <= 0) return 1;
  const double s = std::ceil(static_cast<double>(std::max(min_remaining_tokens, 1)) / per_stream_rate);
  return static_cast<int>(std::clamp(s, 1.0, 3600.0));
}

Decision Admission::refuse(Reason r) const {
  Decision d;
  d.reason = r;
  const EngineStats st = engine_.stats();
  double rate = st.decode_rate;
  if (rate <= 0) rate = predicted_stream_rate(st.step_model, st.active);
  d.retry_after_s = r == Reason::Draining ? 5 : retry_after_seconds(engine_.min_remaining_tokens(), rate);
  return d;
}

Decision Admission::precheck() const {
  if (draining_.load()) return refuse(Reason::Draining);
  if (pressure_.load()) return refuse(Reason::MemoryPressure);
  const EngineStats st = engine_.stats();
  // Every active slot (prefilling ones too) counts as a decoding stream: it will be.
  Decision d;
  d.predicted_rate = predicted_stream_rate(st.step_model, st.active + 1);
  d.rate_floor = stream_rate_floor(o_, st.step_model);
  // With nothing running, one stream is the best this hardware can do:
  // admit it even below the floor, or the server would refuse forever and
  // never measure itself again.
  if (d.predicted_rate < d.rate_floor && st.active > 0) {
    Decision r = refuse(Reason::Throughput);
    r.predicted_rate = d.predicted_rate;
    r.rate_floor = d.rate_floor;
    return r;
  }
  return d;
}

int Admission::acquire(Decision& d, const std::atomic<bool>* cancelled) {
  int slot = engine_.try_acquire();
  if (slot >= 0) return slot;
  // The bounded wait queue: a counter, not a list; a waiter polls for a slot.
  if (o_.queue > 0) {
    int q = queued_.load();
    while (q < o_.queue && !queued_.compare_exchange_weak(q, q + 1)) {
    }
    if (q < o_.queue) {
      const auto deadline = std::chrono::steady_clock::now() +
                            std::chrono::milliseconds(static_cast<int64_t>(o_.queue_timeout_s * 1000));
      while (std::chrono::steady_clock::now() < deadline && !draining_.load() &&
             !(cancelled && cancelled->load())) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        slot = engine_.try_acquire();
        if (slot >= 0) break;
      }
      queued_.fetch_sub(1);
      if (slot >= 0) return slot;
      if (draining_.load()) {
        d = refuse(Reason::Draining);
        return -1;
      }
    }
  }
  d = refuse(Reason::Slots);
  return -1;
}

bool Admission::ready() const {
  if (!precheck().ok()) return false;
  return engine_.active_slots() < engine_.n_slots();
}

}  // namespace edgelm::serve
