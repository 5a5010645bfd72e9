// Admission control: the gate in front of the engine, and the one place
// where a request is given a slot. Every decision is cheap (a mutex, a few
// atomics and some arithmetic), so a refusal costs microseconds and never
// waits behind the work it protects.
//
// A request is admitted only if all hold:
//   - the server is not draining and memory is not under pressure;
//   - with it, every decoding stream still gets at least the promised
//     tokens/s according to the engine's measured step-time model
//     t(step) = a + b * tokens (throughput gate; a lone request on an idle
//     server is always admitted, since one stream is the best the hardware
//     can do);
//   - a slot is free, or (with a wait queue) one is handed to it before its
//     timeout.
//
// Deciding and reserving happen in one step under the gate's lock, so a
// burst of simultaneous requests is decided one after another, each seeing
// the slots the ones before it took. Waiters are served first in, first
// out: a released slot is handed to the oldest waiter (after the gate's
// checks are run again for it), never to a newcomer that arrived later.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include "engine/engine.h"

namespace edgelm::serve {

enum class Reason : uint8_t { None = 0, Slots, Throughput, MemoryPressure, Draining, PromptTooLong, Ttft };
std::string_view reason_name(Reason r);
constexpr int kReasonCount = 7;

// A priority class: requests of the more urgent classes (earlier in
// AdmissionOptions::classes) are admitted first.
struct ClassSpec {
  std::string name;
  int reserved = 0;  // slots only this class (or a more urgent one) may take
};

// The index of the class named `name` in `classes`; -1: no such class.
int class_index(const std::vector<ClassSpec>& classes, std::string_view name);

struct AdmissionOptions {
  // Most urgent first. With one class every request is equal.
  std::vector<ClassSpec> classes = {{"chat", 0}};
  // A request of a class that finds no slot may end the youngest stream of
  // a less urgent class (Finish::Preempted) and take its slot.
  bool preempt = false;
  // Requests of classes more urgent than this one (an index) are not
  // refused by the throughput and first-token checks: for a sensor's
  // alarm a late answer beats a 429, and less urgent streams slow for it.
  int default_class = 0;
  // Whether any request can be of a class before the default: only the
  // X-Priority header (--class-header) or an API key mapped to such a class
  // can make one. When none can, nothing waits for urgent requests: no
  // prompt step is bounded by urgent_wait_s and no prompt is promoted
  // (set by serve::urgent_requests_possible).
  bool urgent_requests = true;
  // With classes more urgent than the default, a step that prefills a less
  // urgent prompt lasts at most this long, or four one-token steps if that
  // is longer (EngineOptions::urgent_wait_s), so an urgent request never
  // waits long behind one. 0: no limit.
  double urgent_wait_s = 0.05;
  double min_stream_rate = 5.0;  // tokens/s every admitted stream must keep
  // ... and at least 1 / max_slowdown of what a lone stream gets (0: off).
  double max_slowdown = 2.0;
  int queue = 0;                 // requests that may wait for a slot (0: reject at once)
  double queue_timeout_s = 10.0;
  // The first-token promise: a request is admitted only if its predicted
  // time to first token (waiting and the step in progress included) is at
  // most max_ttft_slowdown x the predicted unloaded time of the prompt
  // tokens it must compute, or of one token's allowance of the decoding
  // streams when that is longer (0: off), and at most max_ttft_s seconds
  // (0: off). Checked with a margin (the prediction times the margin): the
  // promise is a tail figure. The margin is the largest measured / predicted
  // ratio among the last TtftSpread::kWindow admitted requests' first tokens, at
  // least ttft_margin and at most ttft_margin_max: while predictions run
  // short (a busy machine, a flood to parse), the gate plans for it.
  double max_ttft_slowdown = 3.0;
  double max_ttft_s = 0;
  double ttft_margin = 1.15;
  double ttft_margin_max = 2.0;
};

struct Decision {
  Reason reason = Reason::None;
  int retry_after_s = 0;     // for 429/503
  double predicted_rate = 0;  // tokens/s per stream if admitted (throughput gate)
  double rate_floor = 0;      // the tokens/s every stream was promised when this was decided
  bool waited = false;        // the request waited in the queue
  bool preempted = false;     // it took the slot of a less urgent stream
  int reuse = 0;              // prompt tokens the granted slot already holds
  int copy_from = -1;         // where a longer prefix is copied from (GenerateParams::copy_from)
  int copied = 0;             // ... and how long it was when decided (the engine checks again)
  double predicted_ttft = 0;  // seconds to the first token, waiting included
  double unloaded_ttft = 0;   // the same on an idle server
  double promised_ttft = 0;   // the most the first-token promise allows it
  double margin = 0;          // the margin the gate planned with (TtftSpread)
  // Seconds after submission at which the engine promotes its prompt if it
  // is still waiting (GenerateParams::promote_after_s); 0: never.
  double promote_after_s = 0;
  bool ok() const { return reason == Reason::None; }
};

// What the gate knows of a request when it decides.
struct Ask {
  std::span<const int32_t> prompt;  // after truncation
  int max_tokens = 0;               // after clamping to the slot
  bool reuse = true;                // may start from a slot's cached prefix
  int cls = 0;                      // index into AdmissionOptions::classes
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

// A prompt admitted before the request being predicted: the tokens it still
// has to prefill, its max_tokens and its class (lower: more urgent).
struct PromptAhead {
  int remaining = 0;
  int max_tokens = 0;
  int priority = 0;       // its class
  bool promoted = false;  // past its first-token promise (Engine::promoted)
};
// A stream decoding now: output tokens so far, its max_tokens, seconds
// since its first token, its class.
struct StreamAhead {
  int n_out = 1;
  int max_tokens = 0;
  double elapsed = 0;
  int priority = 0;
};

// Predicted seconds to the first token of a request of class `priority` that
// must prefill `compute` tokens after the prompts admitted before it
// (`ahead`, in the order the engine serves them: by class, then first come,
// first served), beside the `streams` decoding now. Step by step as the
// engine runs them: a step ends at the first prompt that ends in it; its
// prompt tokens come from prefill_budget with the
// least stream_bank of the streams at least as urgent as the prompt served;
// each step timed by the step model; every stream one token further and
// its elapsed time one step longer; a stream that reaches its max_tokens
// ends (one that ends sooner by end-of-text makes the figure conservative);
// a prompt that ends decodes from the next step. Infinity when prefill
// could not advance within 4096 steps. `scratch` (optional) holds the
// simulated streams, so that a caller can reserve it once.
double predict_ttft(const StepModel& m, std::span<const PromptAhead> ahead, int compute, int priority,
                    std::span<const StreamAhead> streams, int step_tokens, const EngineOptions& eo,
                    std::vector<StreamAhead>* scratch = nullptr);

// Seconds until a slot is likely to free: the soonest-finishing stream's
// remaining tokens at the measured per-stream rate, rounded up, at least 1.
int retry_after_seconds(int min_remaining_tokens, double per_stream_rate);

// The margin of the first-token promise: how far measured first tokens
// have strayed above their predictions. Keeps the measured / predicted
// ratio of the last kWindow requests; the margin is the largest of them,
// at least `floor` and at most `cap`. Predictions under kMinPredicted
// seconds are not counted (a step's own length dwarfs them). No allocation.
class TtftSpread {
 public:
  static constexpr int kWindow = 32;
  static constexpr double kMinPredicted = 0.05;
  TtftSpread(double floor, double cap) : floor_(floor), cap_(std::max(floor, cap)) {}
  void observe(double predicted_s, double measured_s);
  double margin() const;

 private:
  double floor_, cap_;
  std::array<double, kWindow> ratio_{};
  int n_ = 0, next_ = 0;
};

// The unloaded yardstick of the first-token promise: the idle step fit
// (EngineStats::idle_model) at its lowest over the last `window` seconds.
// Under load the steps taken alone share the cores with the HTTP side and
// the fit creeps up (6% in a 30 s overload run), and a promise measured
// against it would loosen with the load; the window lets a board that has
// really slowed (a hot one) move the yardstick within minutes. Fits are
// compared by their time for `ref_tokens` tokens.
class Yardstick {
 public:
  Yardstick(double window_s, int ref_tokens) : window_s_(window_s), ref_(ref_tokens) {}
  // Takes the fit of the moment (at `now_s`, any monotonic seconds) and
  // returns the one to measure against.
  const StepModel& update(const StepModel& idle, double now_s);
  const StepModel& current() const { return best_; }

 private:
  double window_s_;
  int ref_;
  StepModel best_;
  double since_s_ = 0;
  bool set_ = false;
};

class Admission {
 public:
  Admission(Engine& engine, const AdmissionOptions& o);
  ~Admission();
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // Decides on a request and, when it is admitted, reserves its slot (in
  // `out`), in one step. The slot is the free one that holds the longest
  // prefix of the prompt (d.reuse tokens of it need no prefill) when that
  // prefix is at least half the prompt or 256 tokens, else the least
  // recently used one. When every slot is taken and the queue has room,
  // waits for a slot to be handed over (by a release, or when a slot stops
  // lending its rows to a copy: both events, no poll), asking `gone` (the
  // client hung up) every 50 ms. Returns the decision; `out` is valid only when
  // it is ok().
  Decision admit(const Ask& ask, SlotRef& out, const std::function<bool()>& gone = {});
  // Gives a slot back to the engine (cancelling what still runs in it) and
  // hands it to the oldest waiter. A stale reference does nothing.
  void release(SlotRef ref);
  // Would a request be admitted now? Reserves nothing (for /ready).
  Decision peek();
  // What admit() would refuse for a request of class `cls` whatever its
  // prompt, decided before the request is parsed: draining, memory
  // pressure, or every slot taken with no way to wait for one (the queue
  // full, no preemption, a class that does not wait for its first-token
  // promise), by the checks and in the order admit() makes them. Counts the
  // refusal as admit() does. ok() when the prompt is needed to decide.
  Decision refuse_at_once(int cls);
  // The class of the request holding `slot` (-1 when free).
  int slot_class(int slot) const;
  // Admitted and refused requests of each class.
  uint64_t admitted(int cls) const { return admitted_[static_cast<size_t>(cls)].load(); }
  uint64_t refused(int cls) const { return refused_[static_cast<size_t>(cls)].load(); }

  void set_draining();
  bool draining() const { return draining_.load(); }
  void set_memory_pressure(bool on) { pressure_.store(on); }
  bool memory_pressure() const { return pressure_.load(); }
  int queued() const { return queued_.load(); }
  const AdmissionOptions& options() const { return o_; }

  // A request's first token came `measured_s` after the decision that
  // predicted it in `predicted_s`: the margin learns from it (TtftSpread).
  void observe_ttft(double predicted_s, double measured_s);
  // The margin the next decision plans with.
  double ttft_margin() const;

 private:
  struct Waiter {
    Ask ask;
    std::condition_variable cv;
    SlotRef granted;
    Decision d;
    bool done = false;  // granted or refused by a hand-off
  };
  // The whole decision for `ask`; reserves a slot when `reserve` and it is ok.
  Decision decide_locked(const Ask& ask, SlotRef* reserve);
  // The free slot for `ask`: the one with the longest useful cached prefix,
  // else the least recently used (slot -1 when none is free); `reuse`
  // tokens of its cache are kept. When the pinned prefix or another slot
  // holds more of the prompt, it is the copy source.
  struct Choice {
    int slot = -1;
    int reuse = 0;
    int copy_from = -1;
    int copied = 0;
  };
  Choice choose_slot_locked(const Ask& ask);
  // Is a request of class `cls` or a more urgent one waiting? Nobody
  // overtakes such a waiter: a newcomer decides at once only without one.
  bool waiter_ahead_locked(int cls) const;
  // Hands free slots to waiters, oldest first, while the gate admits them.
  void hand_off_locked();
  // The engine's call when a slot stops lending its rows: the first waiter
  // wakes and runs hand_off_locked (on its own thread, not the engine's).
  void lending_ended();
  uint64_t lending_ends_ = 0;  // under mu_: how many lending_ended() calls so far
  Decision refuse(Reason r) const;
  // Draining or memory pressure: a refusal whatever the slots and the queue
  // say, checked before anything else; None when neither holds.
  Reason closed() const {
    return draining_.load()   ? Reason::Draining
           : pressure_.load() ? Reason::MemoryPressure
                              : Reason::None;
  }

  Engine& engine_;
  AdmissionOptions o_;
  mutable std::mutex mu_;
  std::vector<Waiter*> waiters_;  // oldest first; capacity o_.queue, reserved once
  // Prompt tokens to compute of each reserved slot not yet submitted (the
  // engine counts them once they are); valid while the slot is Reserved.
  std::vector<int> reserved_compute_;
  // Scratch of decide_locked (capacity n_slots, reserved once).
  std::vector<std::pair<uint64_t, PromptAhead>> ahead_;  // (class and submission order, prompt)
  std::vector<PromptAhead> ahead_prompts_;
  std::vector<StreamAhead> streams_, sim_streams_;
  std::vector<int> reserved_max_tokens_;  // max_tokens of each reserved slot, as reserved_compute_
  std::vector<int> slot_class_;  // class of each held slot (set when reserved)
  std::vector<int> held_;        // scratch: held slots per class
  std::vector<uint8_t> promoted_;  // scratch: whether each slot's prompt is promoted now
  // Scratch: the slots' states, read once at the start of a decision so
  // every count in it agrees (a slot moving on meanwhile is counted as it was).
  std::vector<Engine::SlotState> states_;
  std::unique_ptr<std::atomic<uint64_t>[]> admitted_, refused_;  // per class
  // Finds the youngest stream of a class less urgent than `cls` and asks the
  // engine to end it; true if one was found.
  bool preempt_locked(int cls);
  // How long `ask` may wait for a slot and still start within its
  // first-token promise (with the margin), from its unloaded time.
  double latest_start_locked(const Ask& ask);
  // The unloaded yardstick (Yardstick) with the engine's idle fit of the moment.
  const StepModel& yardstick_locked(const EngineStats& st);
  // Seconds until the k-th held slot (1: the soonest) is likely to be free:
  // a finished one at once, one asked to make way within a step, a stream
  // after its remaining tokens at the current step time, a prompt after its
  // prefill and its whole answer. Infinity with fewer than k slots.
  double kth_free_locked(int k);
  std::vector<double> free_in_;  // scratch of kth_free_locked (capacity n_slots)
  Decision admit_waiting(const Ask& ask, SlotRef& out, const std::function<bool()>& gone);
  TtftSpread spread_;  // under mu_
  Yardstick yard_;     // under mu_
  std::atomic<bool> draining_{false};
  std::atomic<bool> pressure_{false};
  std::atomic<int> queued_{0};
};

}  // namespace edgelm::serve
