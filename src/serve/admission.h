// Admission control: the gate in front of the engine. Every decision is
// cheap (atomics and a few arithmetic operations), so a refusal costs
// microseconds and never waits behind the work it protects.
//
// A request is admitted only if all hold:
//   - the server is not draining and memory is not under pressure;
//   - with it, every decoding stream still gets at least min_stream_rate
//     tokens/s according to the engine's measured step-time model
//     t(step) = a + b * tokens (throughput gate; a lone request on an idle
//     server is always admitted, since one stream is the best the hardware
//     can do);
//   - a slot is free (or, with a wait queue, one frees before the timeout).
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

#include "engine/engine.h"

namespace edgelm::serve {

enum class Reason : uint8_t { None = 0, Slots, Throughput, MemoryPressure, Draining, PromptTooLong, Loading };
std::string_view reason_name(Reason r);
constexpr int kReasonCount = 7;

struct AdmissionOptions {
  double min_stream_rate = 5.0;  // tokens/s every admitted stream must keep
  // ... and at least 1 / max_slowdown of what a lone stream gets (0: off).
  double max_slowdown = 2.0;
  int queue = 0;                 // requests that may wait for a slot (0: reject at once)
  double queue_timeout_s = 10.0;
};

struct Decision {
  Reason reason = Reason::None;
  int retry_after_s = 0;     // for 429/503
  double predicted_rate = 0;  // tokens/s per stream if admitted (throughput gate)
  double rate_floor = 0;      // the tokens/s every stream was promised when this was decided
  bool ok() const { return reason == Reason::None; }
};

// The throughput model, separate from the engine so it can be tested with
// chosen figures: the tokens/s each of `streams` decoding streams gets from
// steps of t = a + b * streams. (Prefill shares a step only as far as the
// engine keeps the step within 1 / min_stream_rate.)
double predicted_stream_rate(const StepModel& m, int streams);
// The rate every admitted stream is promised: the larger of min_stream_rate
// and a lone stream's predicted rate / max_slowdown.
double stream_rate_floor(const AdmissionOptions& o, const StepModel& m);

// The engine's side of the same promise: prefill joins a step with running
// streams only as far as the step's predicted time keeps min_stream_rate
// (0.5 s a token when that gate is off) and within 0.85 x max_slowdown of a
// lone stream's step (Engine's step cap). Sets eo.max_step_seconds and
// eo.max_slowdown; everything that runs a gated engine calls this, so the
// gate and the engine cannot promise different rates.
void keep_promise(const AdmissionOptions& o, EngineOptions& eo);

// Seconds until a slot is likely to free: the soonest-finishing stream's
// remaining tokens at the measured per-stream rate, rounded up, at least 1.
int retry_after_seconds(int min_remaining_tokens, double per_stream_rate);

class Admission {
 public:
  Admission(Engine& engine, const AdmissionOptions& o) : engine_(engine), o_(o) {}

  // Cheap checks that need no slot: draining, memory pressure, throughput.
  Decision precheck() const;
  // Claims a slot, waiting in the bounded queue if configured. Returns the
  // slot, or -1 with the decision saying why. `cancelled` is polled while
  // waiting (the client went away).
  int acquire(Decision& d, const std::atomic<bool>* cancelled = nullptr);

  void set_draining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  void set_memory_pressure(bool on) { pressure_.store(on); }
  bool memory_pressure() const { return pressure_.load(); }
  int queued() const { return queued_.load(); }
  // Would a request be admitted now? (for /ready)
  bool ready() const;
  const AdmissionOptions& options() const { return o_; }

 private:
  Decision refuse(Reason r) const;

  Engine& engine_;
  AdmissionOptions o_;
  std::atomic<bool> draining_{false};
  std::atomic<bool> pressure_{false};
  std::atomic<int> queued_{0};
};

}  // namespace edgelm::serve
