#include "serve/admission.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
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
    case Reason::Ttft: return "ttft";
  }
  return "?";
}

int class_index(const std::vector<ClassSpec>& classes, std::string_view name) {
  for (size_t i = 0; i < classes.size(); ++i)
    if (classes[i].name == name) return static_cast<int>(i);
  return -1;
}

double predicted_stream_rate(const StepModel& m, int streams) {
  const double t = m.predict(std::max(streams, 1));
  return t > 0 ? 1.0 / t : 1e9;
}

double stream_rate_floor(const AdmissionOptions& o, const StepModel& m) {
  double floor = o.min_stream_rate;
  if (o.max_slowdown > 0 && m.lone_step() > 0) floor = std::max(floor, 1.0 / m.lone_step() / o.max_slowdown);
  return floor;
}

void keep_promise(const AdmissionOptions& o, EngineOptions& eo) {
  eo.max_step_seconds = o.min_stream_rate > 0 ? 1.0 / o.min_stream_rate : 0.5;
  eo.max_slowdown = o.max_slowdown;
  eo.urgent_classes = o.urgent_requests ? o.default_class : 0;
  eo.urgent_wait_s = o.urgent_wait_s;
}

double predict_ttft(const StepModel& m, std::span<const PromptAhead> ahead, int compute, int priority,
                    std::span<const StreamAhead> streams, int step_tokens, const EngineOptions& eo,
                    std::vector<StreamAhead>* scratch) {
  std::vector<StreamAhead> local;
  std::vector<StreamAhead>& live = scratch != nullptr ? *scratch : local;
  live.assign(streams.begin(), streams.end());
  for (StreamAhead& s : live) s.n_out = std::max(s.n_out, 1);
  const double allowance = token_allowance(m, eo);
  double t = 0;
  size_t next = 0;  // the prompt being prefilled: ahead[next], or ours once next == ahead.size()
  auto remaining = [&](size_t i) { return i < ahead.size() ? std::max(ahead[i].remaining, 0) : std::max(compute, 1); };
  auto front = [&](size_t i) {
    return i < ahead.size() ? PrefillFront{ahead[i].priority, ahead[i].promoted} : PrefillFront{priority, false};
  };
  int left = remaining(0);
  // Bounded, since it runs under the gate's lock: a first token more than
  // 4096 steps away is not worth predicting (infinity: refused).
  for (int n_steps = 0; n_steps < 4096; ++n_steps) {
    const int n_decode = static_cast<int>(live.size());
    // What the engine lends to prefill: the least bank of the streams that
    // lend to the prompt served first in the step (lends_to_prefill).
    double slack = std::numeric_limits<double>::infinity();
    if (std::isfinite(allowance))
      for (const StreamAhead& s : live)
        if (lends_to_prefill(s.priority, front(next), eo))
          slack = std::min(slack, stream_bank(m, allowance, n_decode, s.n_out, s.max_tokens, s.elapsed));
    const int budget = prefill_budget(m, n_decode, step_tokens, eo, slack, front(next));
    if (budget <= 0) break;
    int room = budget, taken = 0;
    const size_t first = next;
    bool ours_done = false;
    while (room > 0) {
      const int take = std::min(room, left);
      left -= take;
      room -= take;
      taken += take;
      if (left > 0) continue;
      if (next == ahead.size()) {
        ours_done = true;
        break;
      }
      left = remaining(++next);
      break;  // as the engine: a step in which a prompt ends takes nothing of the next one
    }
    const double step = m.predict(n_decode + taken);
    t += step;
    if (ours_done) return t;
    // Every stream made a token; those at their max_tokens end.
    for (size_t k = 0; k < live.size();) {
      StreamAhead& s = live[k];
      ++s.n_out;
      s.elapsed += step;
      if (s.n_out >= s.max_tokens) {
        s = live.back();
        live.pop_back();
      } else {
        ++k;
      }
    }
    // The prompts that ended made their first token and decode from now on.
    for (size_t k = first; k < next; ++k)
      if (ahead[k].max_tokens > 1) live.push_back({1, ahead[k].max_tokens, 0, ahead[k].priority});
  }
  return std::numeric_limits<double>::infinity();
}

int retry_after_seconds(int min_remaining_tokens, double per_stream_rate) {
  if (per_stream_rate <= 0) return 1;
  const double s = std::ceil(static_cast<double>(std::max(min_remaining_tokens, 1)) / per_stream_rate);
  return static_cast<int>(std::clamp(s, 1.0, 3600.0));
}

Admission::Admission(Engine& engine, const AdmissionOptions& o)
    : engine_(engine),
      o_(o),
      reserved_compute_(static_cast<size_t>(engine.n_slots()), 0),
      reserved_max_tokens_(static_cast<size_t>(engine.n_slots()), 0),
      slot_class_(static_cast<size_t>(engine.n_slots()), 0),
      states_(static_cast<size_t>(engine.n_slots()), Engine::SlotState::Free),
      spread_(o.ttft_margin, o.ttft_margin_max),
      yard_(300, engine.plan().step_tokens) {
  if (o_.classes.empty()) o_.classes.push_back({"chat", 0});
  held_.resize(o_.classes.size());
  promoted_.resize(static_cast<size_t>(engine.n_slots()));
  admitted_ = std::make_unique<std::atomic<uint64_t>[]>(o_.classes.size());
  refused_ = std::make_unique<std::atomic<uint64_t>[]>(o_.classes.size());
  waiters_.reserve(static_cast<size_t>(std::max(o_.queue, 0)));
  ahead_.reserve(static_cast<size_t>(engine.n_slots()));
  ahead_prompts_.reserve(static_cast<size_t>(engine.n_slots()));
  free_in_.reserve(static_cast<size_t>(engine.n_slots()));
  streams_.reserve(static_cast<size_t>(engine.n_slots()));
  sim_streams_.reserve(static_cast<size_t>(engine.n_slots()));
  engine_.on_lending_ended([this] { lending_ended(); });
}

Admission::~Admission() { engine_.on_lending_ended({}); }

void Admission::lending_ended() {
  // Only a note and a wake-up under the lock: the engine thread may be the
  // caller, and the decision (hand_off_locked) is the waiter's to make.
  std::lock_guard<std::mutex> lk(mu_);
  ++lending_ends_;
  if (!waiters_.empty()) waiters_.front()->cv.notify_one();
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

Admission::Choice Admission::choose_slot_locked(const Ask& ask) {
  // A match is worth a slot when it covers half the prompt or 256 tokens:
  // a few shared header tokens must not make a request overwrite another
  // conversation's cache when an older one could go instead.
  const int n = static_cast<int>(ask.prompt.size());
  // A free slot that another request is copying from cannot be taken
  // (for the rest of the engine's step).
  auto available = [&](int i) { return states_[static_cast<size_t>(i)] == Engine::SlotState::Free && !engine_.lending(i); };
  // Slots reserved for more urgent classes and not in use by them stay free.
  std::fill(held_.begin(), held_.end(), 0);
  int n_free = 0;
  for (int i = 0; i < engine_.n_slots(); ++i) {
    if (states_[static_cast<size_t>(i)] != Engine::SlotState::Free) ++held_[static_cast<size_t>(slot_class_[static_cast<size_t>(i)])];
    else if (available(i)) ++n_free;
  }
  int kept = 0;
  for (int k = 0; k < ask.cls; ++k)
    kept += std::max(0, o_.classes[static_cast<size_t>(k)].reserved - held_[static_cast<size_t>(k)]);
  Choice c;
  if (n_free - kept <= 0) return c;
  auto useful = [&](int match) { return match > 0 && (2 * match >= n || match >= 256); };
  int best = -1, best_match = 0, lru = -1, lru_match = 0;
  uint64_t lru_age = 0;
  for (int i = 0; i < engine_.n_slots(); ++i) {
    if (!available(i)) continue;
    // Slots change hands only under this lock, so a free slot's cache is
    // stable while it is read.
    const int match = ask.reuse ? engine_.cached_prefix(i, ask.prompt) : 0;
    if (useful(match) && match > best_match) {
      best = i;
      best_match = match;
    }
    const uint64_t age = engine_.last_used(i);
    if (lru < 0 || age < lru_age) {
      lru = i;
      lru_age = age;
      lru_match = match;
    }
  }
  if (best < 0) {
    best = lru;
    best_match = lru_match;
  }
  c.slot = best;
  // At least one token is computed: its logits start the answer.
  c.reuse = std::clamp(best_match, 0, std::max(n - 1, 0));
  if (!ask.reuse) return c;
  // A longer prefix elsewhere (the pinned system prompt, another slot's
  // cache or running prompt) is copied in: a memcpy of its KV rows costs far
  // less than computing them.
  int src_match = std::min(engine_.pinned_prefix(ask.prompt), n - 1);
  if (src_match > c.reuse) {
    c.copy_from = kPinnedPrefix;
    c.copied = src_match;
  }
  for (int i = 0; i < engine_.n_slots(); ++i) {
    if (i == best) continue;
    const int m = std::min(engine_.prefix_in_slot(i, ask.prompt), n - 1);
    if (m > std::max(c.reuse, c.copied)) {
      c.copy_from = i;
      c.copied = m;
    }
  }
  return c;
}

Decision Admission::decide_locked(const Ask& ask, SlotRef* reserve) {
  if (const Reason r = closed(); r != Reason::None) return refuse(r);
  const EngineStats st = engine_.stats();
  // One reading of the slots' states for the whole decision, so that all its
  // counts agree: slots are acquired only under this lock, but held ones move
  // on (Reserved -> Queued -> ... -> Free) at any time.
  for (int i = 0; i < engine_.n_slots(); ++i) states_[static_cast<size_t>(i)] = engine_.state(i);
  auto state = [&](int i) { return states_[static_cast<size_t>(i)]; };
  // Every held slot (reserved and prefilling ones too) counts as a decoding
  // stream: it will be. Slots are taken only under this lock, so the count
  // includes every request decided before this one. Less urgent classes do
  // not count against a more urgent request: their streams may slow for it.
  // A prompt past its first-token promise is promoted (Engine::promoted):
  // it goes ahead of this one when its prefill rank says so.
  const EngineOptions& eo = engine_.options();
  for (int i = 0; i < engine_.n_slots(); ++i) {
    const auto st_i = state(i);
    const bool waiting = st_i == Engine::SlotState::Queued || st_i == Engine::SlotState::Prefill;
    promoted_[static_cast<size_t>(i)] = waiting && engine_.promoted(i);
  }
  auto rank = [&](int i) {
    return prefill_rank({slot_class_[static_cast<size_t>(i)], promoted_[static_cast<size_t>(i)] != 0}, eo);
  };
  auto counts = [&](int i) { return rank(i) <= prefill_rank({ask.cls, false}, eo); };
  int active = 0;
  for (int i = 0; i < engine_.n_slots(); ++i) active += state(i) != Engine::SlotState::Free && counts(i);
  Decision d;
  // A request that finds every slot held waits for one and then runs as one
  // of n_slots streams, never n_slots + 1: predicting more would shed a
  // queued request at every hand-off whose step grows faster per token than
  // its fixed part (the fleet test's queue under ASan).
  d.predicted_rate = predicted_stream_rate(st.step_model, std::min(active + 1, engine_.n_slots()));
  d.rate_floor = stream_rate_floor(o_, st.step_model);
  // With nothing running, one stream is the best this hardware can do:
  // admit it even below the floor, or the server would refuse forever and
  // never measure itself again.
  const bool exempt = ask.cls < o_.default_class;
  if (d.predicted_rate < d.rate_floor && active > 0 && !exempt) {
    Decision r = refuse(Reason::Throughput);
    r.predicted_rate = d.predicted_rate;
    r.rate_floor = d.rate_floor;
    return r;
  }
  if (reserve) {
    const Choice choice = choose_slot_locked(ask);
    const int slot = choice.slot;
    if (slot < 0) return refuse(Reason::Slots);
    const int reuse = std::max(choice.reuse, choice.copied);
    // The first-token promise, for the tokens this request must compute
    // behind the prompts admitted before it.
    const int compute = std::max(static_cast<int>(ask.prompt.size()) - reuse, 1);
    // The prompts ahead of this one, in the order the engine serves them
    // (by class, then submission; reserved ones after the submitted ones of
    // their class), and every stream decoding: less urgent ones lend it
    // nothing but still take their share of each step.
    // All of it as it will be when the step running now ends: nothing new
    // joins a step once it has started.
    const double running = engine_.step_left();
    const int after = running > 0 ? 1 : 0;  // tokens each stream makes in it
    ahead_.clear();
    streams_.clear();
    for (int i = 0; i < engine_.n_slots(); ++i) {
      const int cls = slot_class_[static_cast<size_t>(i)];
      const bool promoted = promoted_[static_cast<size_t>(i)] != 0;
      // By prefill rank (-1 for a promoted prompt when no class is urgent).
      const uint64_t key = static_cast<uint64_t>(rank(i) + 1) << 56;
      if (state(i) == Engine::SlotState::Decode) {
        const Engine::Progress p = engine_.progress(i);
        const int n = std::max(p.n_out, 1) + after;
        if (p.max_tokens > 0 && n >= p.max_tokens) continue;  // it ends in the running step
        streams_.push_back({n, p.max_tokens, p.elapsed + running, cls});
      } else if (state(i) == Engine::SlotState::Reserved) {
        // After every submitted prompt of its class (a submission number is
        // far below 2^56 - slots), each key its own.
        const uint64_t last = (uint64_t{1} << 56) - 1 - static_cast<uint64_t>(engine_.n_slots() - i);
        if (counts(i))
          ahead_.push_back({key | last, {reserved_compute_[static_cast<size_t>(i)],
                                         reserved_max_tokens_[static_cast<size_t>(i)], cls, false}});
      } else if (state(i) == Engine::SlotState::Queued || state(i) == Engine::SlotState::Prefill) {
        const int r = engine_.prefill_remaining(i);
        if (r > 0) {
          if (counts(i))
            ahead_.push_back({key | engine_.submission(i), {r, engine_.max_tokens(i), cls, promoted}});
        } else if (engine_.in_step(i) > 0 && engine_.max_tokens(i) > 1) {
          // Its prompt ends in the running step: it decodes from the next one.
          streams_.push_back({1, engine_.max_tokens(i), 0, cls});
        }
      }
    }
    // Keys are distinct, so an in-place sort gives the one order (stable_sort
    // would allocate a buffer on every decision).
    std::sort(ahead_.begin(), ahead_.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    ahead_prompts_.clear();
    for (const auto& [key, p] : ahead_) ahead_prompts_.push_back(p);
    const int steps = engine_.plan().step_tokens;
    d.predicted_ttft =
        running + predict_ttft(st.step_model, ahead_prompts_, compute, ask.cls, streams_, steps, eo, &sim_streams_);
    // Unloaded: as on an idle server, by the steps taken alone.
    d.unloaded_ttft = predict_ttft(yardstick_locked(st), {}, compute, ask.cls, {}, steps, eo, &sim_streams_);
    // The promise: max_ttft_slowdown x the unloaded time, the step running
    // now included (the prediction counts it). A prompt with almost nothing
    // to compute (copied from another slot) is held to the time per token
    // the streams are promised instead, since a step in progress cannot be
    // cut short for it.
    const double allowance = token_allowance(st.step_model, eo);
    const double floor = std::isfinite(allowance) ? allowance : 0;
    d.promised_ttft = o_.max_ttft_slowdown * std::max(d.unloaded_ttft, floor);
    d.margin = spread_.margin();
    const double planned = d.margin * d.predicted_ttft;
    const bool too_slow = (o_.max_ttft_slowdown > 0 && planned > d.promised_ttft) ||
                          (o_.max_ttft_s > 0 && planned > o_.max_ttft_s);
    // An idle server starts a request as soon as it can: nothing would do better.
    if (too_slow && active > 0 && !exempt) {
      Decision r = refuse(Reason::Ttft);
      // Until the prompts ahead are done, at the rate they are going.
      const double drain =
          ahead_prompts_.empty()
              ? running
              : running + predict_ttft(st.step_model,
                             std::span<const PromptAhead>(ahead_prompts_).first(ahead_prompts_.size() - 1),
                             ahead_prompts_.back().remaining, ahead_prompts_.back().priority, streams_, steps, eo,
                             &sim_streams_);
      r.retry_after_s = static_cast<int>(std::clamp(std::ceil(drain), 1.0, 3600.0));
      r.predicted_ttft = d.predicted_ttft;
      r.unloaded_ttft = d.unloaded_ttft;
      r.promised_ttft = o_.max_ttft_slowdown > 0 ? d.promised_ttft : o_.max_ttft_s;
      if (o_.max_ttft_s > 0) r.promised_ttft = std::min(r.promised_ttft, o_.max_ttft_s);
      return r;
    }
    // Past the time it can start and still keep its promise, a less urgent
    // prompt is promoted by the engine (prefill_rank, lends_to_prefill).
    double promise = o_.max_ttft_slowdown > 0 ? d.promised_ttft : std::numeric_limits<double>::infinity();
    if (o_.max_ttft_s > 0) promise = std::min(promise, o_.max_ttft_s);
    // Promotion serves a prompt that urgent ones held back; without urgent
    // requests a late prompt is a misprediction, and promoting it would
    // only take time the streams were promised.
    d.promote_after_s =
        std::isfinite(promise) && eo.urgent_classes > 0 ? std::max(promise - d.unloaded_ttft, 1e-3) : 0;
    *reserve = engine_.try_acquire(slot);
    if (!reserve->ok()) return refuse(Reason::Slots);
    reserved_compute_[static_cast<size_t>(slot)] = compute;
    reserved_max_tokens_[static_cast<size_t>(slot)] = ask.max_tokens;
    slot_class_[static_cast<size_t>(slot)] = ask.cls;
    d.reuse = choice.reuse;
    d.copy_from = choice.copy_from;
    d.copied = choice.copied;
  } else if (st.active >= engine_.n_slots()) {
    return refuse(Reason::Slots);
  }
  return d;
}

Decision Admission::peek() {
  std::lock_guard<std::mutex> lk(mu_);
  if (const Reason r = closed(); r != Reason::None) return refuse(r);
  if (!waiters_.empty()) return refuse(Reason::Slots);
  return decide_locked(Ask{}, nullptr);
}

bool Admission::waiter_ahead_locked(int cls) const {
  return std::any_of(waiters_.begin(), waiters_.end(), [&](const Waiter* x) { return x->ask.cls <= cls; });
}

Decision Admission::refuse_at_once(int cls) {
  Decision d = [&] {
    std::lock_guard<std::mutex> lk(mu_);
    if (const Reason r = closed(); r != Reason::None) return refuse(r);
    // As admit_waiting decides at arrival: without a waiter of its class or
    // a more urgent one ahead, by decide_locked, whose checks before the
    // slot's choice need no prompt (the rate floor, then a free slot).
    Ask ask;
    ask.cls = cls;
    if (!waiter_ahead_locked(cls)) {
      const Decision first = decide_locked(ask, nullptr);
      if (first.ok() || first.reason != Reason::Slots) return first;
    }
    // No slot: refused at once unless it could preempt, wait in time for
    // its promise (an urgent class) or queue.
    if (o_.preempt || cls < o_.default_class || static_cast<int>(waiters_.size()) < o_.queue) return Decision{};
    return refuse(Reason::Slots);
  }();
  if (!d.ok()) refused_[static_cast<size_t>(cls)].fetch_add(1);
  return d;
}

int Admission::slot_class(int slot) const {
  std::lock_guard<std::mutex> lk(mu_);
  return engine_.state(slot) == Engine::SlotState::Free ? -1 : slot_class_[static_cast<size_t>(slot)];
}

const StepModel& Admission::yardstick_locked(const EngineStats& st) {
  const double now_s = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  return yard_.update(st.idle_model, now_s);
}

double Admission::latest_start_locked(const Ask& ask) {
  const EngineStats st = engine_.stats();
  const int compute = std::max(static_cast<int>(ask.prompt.size()), 1);
  const double unloaded =
      predict_ttft(yardstick_locked(st), {}, compute, ask.cls, {}, engine_.plan().step_tokens, engine_.options());
  double promise = std::numeric_limits<double>::infinity();
  if (o_.max_ttft_slowdown > 0) promise = o_.max_ttft_slowdown * unloaded;
  if (o_.max_ttft_s > 0) promise = std::min(promise, o_.max_ttft_s);
  if (!std::isfinite(promise)) return o_.queue_timeout_s;
  return promise / spread_.margin() - unloaded;
}

const StepModel& Yardstick::update(const StepModel& idle, double now_s) {
  if (!set_ || idle.predict(ref_) <= best_.predict(ref_) || now_s - since_s_ > window_s_) {
    best_ = idle;
    since_s_ = now_s;
    set_ = true;
  }
  return best_;
}

void TtftSpread::observe(double predicted_s, double measured_s) {
  if (!(predicted_s >= kMinPredicted) || !std::isfinite(measured_s) || measured_s < 0) return;
  ratio_[static_cast<size_t>(next_)] = measured_s / predicted_s;
  next_ = (next_ + 1) % kWindow;
  n_ = std::min(n_ + 1, kWindow);
}

double TtftSpread::margin() const {
  double m = floor_;
  for (int i = 0; i < n_; ++i) m = std::max(m, ratio_[static_cast<size_t>(i)]);
  return std::min(m, cap_);
}

void Admission::observe_ttft(double predicted_s, double measured_s) {
  std::lock_guard<std::mutex> lk(mu_);
  spread_.observe(predicted_s, measured_s);
}

double Admission::ttft_margin() const {
  std::lock_guard<std::mutex> lk(mu_);
  return spread_.margin();
}

double Admission::kth_free_locked(int k) {
  const EngineStats st = engine_.stats();
  int held = 0;
  for (int i = 0; i < engine_.n_slots(); ++i) held += engine_.state(i) != Engine::SlotState::Free;
  const double step = st.step_model.predict(std::max(held, 1));
  free_in_.clear();
  for (int i = 0; i < engine_.n_slots(); ++i) {
    const auto state = engine_.state(i);
    if (state == Engine::SlotState::Free || state == Engine::SlotState::Finished) {
      free_in_.push_back(0);  // a finished one is released as its last bytes go out
    } else if (engine_.preempt_pending(i)) {
      free_in_.push_back(step);
    } else if (state == Engine::SlotState::Decode) {
      const Engine::Progress p = engine_.progress(i);
      free_in_.push_back(std::max(p.max_tokens - p.n_out, 1) * step);
    } else {
      // A prompt still to compute, or a slot not yet submitted: its whole answer.
      const int max_tokens =
          state == Engine::SlotState::Reserved ? reserved_max_tokens_[static_cast<size_t>(i)] : engine_.max_tokens(i);
      free_in_.push_back(engine_.prefill_remaining(i) * st.step_model.b + std::max(max_tokens, 1) * step);
    }
  }
  if (k < 1 || k > static_cast<int>(free_in_.size())) return std::numeric_limits<double>::infinity();
  std::nth_element(free_in_.begin(), free_in_.begin() + (k - 1), free_in_.end());
  return free_in_[static_cast<size_t>(k - 1)];
}

bool Admission::preempt_locked(int cls) {
  int victim = -1;
  uint64_t youngest = 0;
  for (int i = 0; i < engine_.n_slots(); ++i) {
    const auto state = engine_.state(i);
    if (slot_class_[static_cast<size_t>(i)] <= cls) continue;
    if (state != Engine::SlotState::Prefill && state != Engine::SlotState::Decode && state != Engine::SlotState::Queued)
      continue;
    if (engine_.preempt_pending(i)) continue;  // already making way for someone
    if (victim < 0 || engine_.submission(i) > youngest) {
      victim = i;
      youngest = engine_.submission(i);
    }
  }
  if (victim < 0) return false;
  engine_.preempt(engine_.holder(victim));
  return true;
}

Decision Admission::admit(const Ask& ask, SlotRef& out, const std::function<bool()>& gone) {
  Decision d = admit_waiting(ask, out, gone);
  (d.ok() ? admitted_ : refused_)[static_cast<size_t>(ask.cls)].fetch_add(1);
  return d;
}

Decision Admission::admit_waiting(const Ask& ask, SlotRef& out, const std::function<bool()>& gone) {
  using Clock = std::chrono::steady_clock;
  out = {};
  Waiter w;
  w.ask = ask;
  // An exception while queued (`gone` allocates, and so may a hand-off)
  // must not leave the queue pointing at this dead waiter, nor strand a
  // slot handed to it while `gone` ran: on the way out the waiter leaves
  // the queue and gives back what it was granted. Destroyed after `lk`
  // below, so it takes the lock itself.
  struct Leave {
    Admission& a;
    Waiter& w;
    bool armed = false;
    ~Leave() {
      if (!armed) return;
      SlotRef granted;
      {
        std::lock_guard<std::mutex> g(a.mu_);
        const auto it = std::find(a.waiters_.begin(), a.waiters_.end(), &w);
        if (it != a.waiters_.end()) {
          a.waiters_.erase(it);
          a.queued_.store(static_cast<int>(a.waiters_.size()));
          // What this waiter might have been woken for goes to the next
          // (a throw here would end the process: the safety net's next
          // hand-off does it then).
          try {
            a.hand_off_locked();
          } catch (...) {
          }
        }
        if (w.done) granted = w.granted;
      }
      if (granted.ok()) {
        try {
          a.release(granted);
        } catch (...) {
          a.engine_.release(granted);
        }
      }
    }
  } leave{*this, w};
  double wait_s = o_.queue > 0 ? o_.queue_timeout_s : 10.0;
  uint64_t seen = 0;  // lending_ends_ as of the last hand-off this waiter ran (or its arrival)
  {
    std::lock_guard<std::mutex> lk(mu_);
    // Behind a waiter of its class it skips decide_locked, but not its
    // first check: a request the hand-off would refuse for draining or
    // memory pressure must not end a stream (preemption) or take a place
    // in the queue first.
    if (const Reason r = closed(); r != Reason::None) return refuse(r);
    if (!waiter_ahead_locked(ask.cls)) {
      Decision d = decide_locked(ask, &out);
      if (d.ok() || d.reason != Reason::Slots) return d;
    }
    // A request that finds no slot may end a less urgent stream and wait
    // for its slot (beyond the queue's length: it has made its own room).
    // Waiters ahead of it have made their own room, so it looks for
    // another stream to end.
    const bool preempting = o_.preempt && preempt_locked(ask.cls);
    // An urgent request (a class before the default) that finds no slot
    // waits for one to free when it can still start within its first-token
    // promise: for a sensor's alarm a late answer beats a 429. It waits no
    // longer than that.
    bool in_time = false;
    if (!preempting && ask.cls < o_.default_class) {
      const double latest = latest_start_locked(ask);
      int ahead = 1;
      for (const Waiter* x : waiters_) ahead += x->ask.cls <= ask.cls;
      if (latest > 0 && kth_free_locked(ahead) <= latest) {
        in_time = true;
        wait_s = latest;
      }
    }
    if (!preempting && !in_time && static_cast<int>(waiters_.size()) >= o_.queue) return refuse(Reason::Slots);
    waiters_.push_back(&w);
    leave.armed = true;
    queued_.store(static_cast<int>(waiters_.size()));
    w.d.preempted = preempting;
    seen = lending_ends_;
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000));
  // A slot reaches a waiter by an event: a release hands it over (done), a
  // slot that stops lending its rows wakes the first waiter, which runs the
  // hand-off itself. The timed wake-ups only look for a client that has
  // hung up (gone) and, as a safety net, run the hand-off once a second.
  constexpr auto kGonePoll = std::chrono::milliseconds(50);
  constexpr auto kSafety = std::chrono::seconds(1);
  auto next_safety = Clock::now() + kSafety;
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    const auto wake = std::min({deadline, next_safety, gone ? Clock::now() + kGonePoll : deadline});
    w.cv.wait_until(lk, wake, [&] { return w.done || lending_ends_ != seen; });
    if (w.done) break;
    if (lending_ends_ != seen || Clock::now() >= next_safety) {
      seen = lending_ends_;
      next_safety = Clock::now() + kSafety;
      if (engine_.active_slots() < engine_.n_slots()) hand_off_locked();
      if (w.done) break;
    }
    Reason why = Reason::None;
    if (draining_.load()) why = Reason::Draining;
    else if (Clock::now() >= deadline) why = Reason::Slots;
    else if (gone) {
      lk.unlock();
      const bool left = gone();
      lk.lock();
      if (w.done) break;
      if (left) why = Reason::Slots;
    }
    if (why != Reason::None) {
      waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &w));
      queued_.store(static_cast<int>(waiters_.size()));
      // A lending that ended since this waiter last looked is not lost with it.
      if (lending_ends_ != seen) hand_off_locked();
      leave.armed = false;
      Decision d = refuse(why);
      d.waited = true;
      return d;
    }
  }
  leave.armed = false;
  out = w.granted;
  w.d.waited = true;
  return w.d;
}

void Admission::hand_off_locked() {
  while (!waiters_.empty()) {
    // The most urgent class first, first come first served within it.
    auto it = waiters_.begin();
    for (auto j = waiters_.begin(); j != waiters_.end(); ++j)
      if ((*j)->ask.cls < (*it)->ask.cls) it = j;
    Waiter* w = *it;
    SlotRef ref;
    Decision d = decide_locked(w->ask, &ref);
    if (!d.ok() && d.reason == Reason::Slots) return;  // still full: the first in line keeps its place
    // Admitted, or refused by a check that has changed since it queued
    // (throughput, memory pressure, draining): either way it is answered now.
    d.preempted = w->d.preempted;
    waiters_.erase(it);
    queued_.store(static_cast<int>(waiters_.size()));
    w->granted = ref;
    w->d = d;
    w->done = true;
    w->cv.notify_one();
  }
}

void Admission::release(SlotRef ref) {
  // May wait up to one engine step for a running request to be cancelled:
  // outside the lock, so decisions go on meanwhile.
  engine_.release(ref);
  std::lock_guard<std::mutex> lk(mu_);
  hand_off_locked();
}

void Admission::set_draining() {
  draining_.store(true);
  std::lock_guard<std::mutex> lk(mu_);
  hand_off_locked();  // every waiter is refused with `draining`
}

}  // namespace edgelm::serve
