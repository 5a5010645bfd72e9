// The engine: a fixed set of slots over one model, driven by one thread that
// runs continuous batching. Every buffer (KV slab, scratch, sampler, slot
// state) is allocated once at creation from the memory plan; serving
// allocates nothing. The engine never sees HTTP or JSON.
//
// A request's life, between a client thread and the engine thread:
//   client: try_acquire() -> SlotRef (slot -1: full), submit(ref, prompt, params)
//   engine: prefill in chunks (prompts in the order they were submitted),
//           then one token per step; publishes each token
//   client: wait_for(slot, seen) / read tokens; cancel(ref) if it goes away
//   engine: marks the slot Finished (stop, length, cancelled)
//   client: release(ref) -> the slot is free for the next try_acquire()
// A SlotRef carries the slot's generation: cancel and release through a
// reference whose slot has since been released (and perhaps taken by another
// request) do nothing, so a late call can never end someone else's request.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "core/region.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/memory_plan.h"
#include "engine/sampler.h"
#include "engine/token_constraint.h"
#include "kernels/kernels.h"
#include "model/forward.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace edgelm {

enum class Finish : uint8_t { None = 0, Stop, Length, Cancelled, Error, Preempted };

// One holding of a slot: its index and the generation it was acquired in.
struct SlotRef {
  int slot = -1;
  uint64_t gen = 0;
  bool ok() const { return slot >= 0; }
};
std::string_view finish_name(Finish f);

struct GenerateParams {
  SamplingParams sampling;
  int max_tokens = 256;     // clamped by the slot's room
  int top_logprobs = -1;    // -1: none; 0..20: chosen token's logprob and this many alternatives
  bool ignore_eos = false;
  // Prompt reuse: the first `reuse` prompt tokens are already in the slot's
  // KV cache from its previous request (see cached_prefix); only the rest is
  // prefilled. At most prompt length - 1 (the last token makes the logits).
  int reuse = 0;
  // Leave this request's tokens and KV in the slot for later requests.
  bool keep_cache = true;
  // Priority class, 0 most urgent: prompts are prefilled by class, then in
  // submission order, and a more urgent prompt's prefill does not wait for
  // the time less urgent streams have banked (they may slow down for it).
  int priority = 0;
  // Seconds after submission at which a prompt still waiting for its first
  // token is promoted: its first-token promise has run out, and it goes
  // ahead of every prompt but the urgent classes' (prefill_rank), in steps
  // no stream's banked time holds back (lends_to_prefill, prefill_budget).
  // A less urgent request may slow for more urgent ones, but not without
  // bound. 0: never.
  double promote_after_s = 0;
  // Where a longer prefix of the prompt may already be computed: another
  // slot (running or free) or kPinnedPrefix. When the request starts, the
  // engine copies the KV rows of the tokens that source holds and that
  // match the prompt (checked token by token then, so a source that moved
  // on costs only speed), on top of the `reuse` tokens; -1: none.
  int copy_from = -1;
  // What the output may be (a JSON schema, say), or null. Owned by the
  // request; the engine steps it on its thread, drops it at release, and
  // ends the answer (Finish::Stop) once the constraint says it is done. An
  // end-of-generation token then always ends the answer (ignore_eos does not
  // apply), and a constraint that allows nothing ends it as Finish::Error.
  std::shared_ptr<TokenConstraint> constraint;
};

// GenerateParams::copy_from: the pinned prefix (Engine::pin_prefix).
inline constexpr int kPinnedPrefix = -2;

struct EngineOptions {
  int threads = 1;
  kernels::Isa isa = kernels::best_isa();
  bool mlock = false;
  // Repack matrices into the layout the ISA's kernels stream best (the
  // packed copy replaces the file's pages: same bytes in the plan).
  bool pack_weights = true;
  // How attention rounds (model/forward.h): f32, or as llama.cpp does.
  AttnMath attn_math = AttnMath::F32;
  // While streams are decoding, a step may add prefill tokens only as far as
  // its predicted time stays within max_step_seconds (the per-token latency
  // every stream was promised); at least min_prefill_chunk so prompts still
  // advance. 0 disables the time limit. With no stream decoding, a step takes
  // up to the plan's step_tokens.
  double max_step_seconds = 0;
  // And within max_slowdown x the predicted time of a one-token step (a
  // lone stream's time per token), so admitted streams keep at least
  // 1 / max_slowdown of a lone stream's speed. 0: no such limit.
  double max_slowdown = 0;
  int min_prefill_chunk = 1;
  // Priority classes before this one (0..urgent_classes-1) are urgent: a
  // prompt of such a class is not held back by the time streams of its own
  // class have banked, only by more urgent ones (see lends_to_prefill). 0:
  // no class is.
  int urgent_classes = 0;
  // How long a step that prefills a promoted prompt, or with urgent classes
  // a less urgent one, may last (predicted; prefill_budget; never less than
  // four one-token steps). 0: no limit.
  double urgent_wait_s = 0;
  // Testing aids: every step takes at least min_step_seconds +
  // min_token_seconds x tokens, as on a slower board (the step-time model
  // measures this like any other cost).
  double min_step_seconds = 0;
  double min_token_seconds = 0;
  void pad_step(std::chrono::steady_clock::time_point t0, int tokens) const;
  // Testing aids for a failed step (the forward pass refusing its batch,
  // which the engine's own checks make unreachable today): fail_step, when
  // set, is asked after each forward step and fails it by returning true;
  // after_error_finish, when set, is called on the engine thread right
  // after each slot of a failed step is finished.
  std::function<bool()> fail_step;
  std::function<void(int slot)> after_error_finish;
};

// Per-step timing fit t(step) = a + b * tokens (seconds), from the steps the
// engine ran, for admission and Retry-After.
struct StepModel {
  double a = 0;         // fixed cost of a step (reading the weights)
  double b = 0;         // cost per token
  uint64_t samples = 0;
  // A lone stream's step on an idle server (EngineStats::idle_model's
  // one-token step), the yardstick of the per-token promise; 0: predict(1).
  // Under load the fit drifts up (the cores and the memory are shared with
  // the HTTP side), and a promise relative to it would drift with it.
  double lone = 0;
  double predict(int tokens) const { return a + b * tokens; }
  double lone_step() const { return lone > 0 ? lone : predict(1); }
};

// One measured step: its tokens and how long it took.
struct StepSample {
  int tokens = 0;
  double seconds = 0;
};

// A lone stream's step (StepModel::lone): the median of the one-token steps
// among `calib` and `recent`, or `fit.predict(1)` when there is none. The
// straight-line fit is not enough there: a step's cost is not linear in its
// tokens (a one-token step reads every weight while a prompt's tokens share
// that read; a padded step has a floor), so a line through prompt steps
// can pass far below the one-token steps actually measured, and every
// promise relative to a lone stream would then be stricter than the
// hardware allows.
// It looks at no more than kLoneStepSamples one-token steps.
inline constexpr size_t kLoneStepSamples = 128;
double lone_step_of(std::span<const StepSample> calib, std::span<const StepSample> recent, const StepModel& fit);

// The prompt a step serves first, as the prefill rules see it: its class,
// and whether it is promoted (waiting past its first-token promise).
struct PrefillFront {
  int cls = 0;
  bool promoted = false;
};

// The time per token every decoding stream is promised on average:
// max_step_seconds, and 0.85 x max_slowdown x a lone stream's step
// (infinity when neither is set).
double token_allowance(const StepModel& m, const EngineOptions& o);

// Prompt tokens one step may take beside `n_decode` decoding streams: up to
// the step's token capacity, and while streams decode, only as many as keep
// the step within one token's allowance plus `slack`, the time the streams
// have banked against their average (at least min_prefill_chunk). The
// engine schedules with it and admission predicts time to first token with
// it, so the two cannot disagree.
//
// `front` is the prompt served first. A step that serves a promoted prompt,
// or with urgent classes configured a less urgent one, lasts at most
// urgent_wait_s or four one-token steps, whichever is longer (predicted; at
// least min_prefill_chunk tokens): an urgent
// request that arrives meanwhile waits no longer for it to end, and the
// streams a promoted prompt does not wait for lose at most that per step.
int prefill_budget(const StepModel& m, int n_decode, int step_tokens, const EngineOptions& o, double slack = 0,
                   const PrefillFront& front = {});

// How many tokens ahead a stream's average is counted when its banked time
// is lent to prefill.
inline constexpr int kDecodeHorizon = 32;

// The time a decoding stream has banked against its promised average
// (`allowance` a token): the allowance of its tokens up to its horizon
// (kDecodeHorizon ahead, or its last token), less the `elapsed` seconds
// since its first token and what its plain steps of `n_decode` streams to
// the horizon will take. `n_out` >= 1 tokens made so far, of `max_tokens`.
// The engine lends the least of these to prefill; admission simulates the
// same figure step by step to predict time to first token, so the two
// cannot disagree. Near its end a stream banks nothing more: its horizon
// stops at its last token.
double stream_bank(const StepModel& m, double allowance, int n_decode, int n_out, int max_tokens, double elapsed);

// Where a prompt goes in the prefill order (then by submission): urgent
// classes' prompts first (EngineOptions::urgent_classes), then promoted
// ones, then the rest by class. With no urgent class, a promoted prompt
// goes first.
inline int prefill_rank(const PrefillFront& f, const EngineOptions& o) {
  if (f.promoted && f.cls >= o.urgent_classes) return 2 * o.urgent_classes - 1;
  return 2 * f.cls;
}

// Whether a decoding stream of class `stream_cls` limits, by what it has
// banked, the prefill of the prompt served first. Streams at least as
// urgent as the prompt do; less urgent ones may slow beyond their promise
// for it. A prompt of an urgent class is held back only by streams more
// urgent than its own class (a sensor's first token does not wait for
// another sensor's banked time), and a promoted prompt by none: it has
// waited past its promise. Those two are bounded instead by the length of
// their steps (prefill_budget). The engine schedules with it and admission
// simulates it.
inline bool lends_to_prefill(int stream_cls, const PrefillFront& f, const EngineOptions& o) {
  if (f.promoted) return false;
  if (f.cls < o.urgent_classes) return stream_cls < f.cls;
  return stream_cls <= f.cls;
}

struct EngineStats {
  uint64_t steps = 0;
  uint64_t prompt_tokens = 0;     // prefilled
  uint64_t generated_tokens = 0;  // sampled
  double prefill_seconds = 0;
  double decode_seconds = 0;
  double decode_rate = 0;   // smoothed tokens/s per stream in recent decode steps
  double prefill_rate = 0;  // smoothed prompt tokens/s
  StepModel step_model;
  // The same fit over the steps taken while at most one slot was busy (and
  // the calibration steps): what a request alone on the server sees, the
  // yardstick of the first-token and per-token promises. Under sustained
  // load it keeps the last idle figures.
  StepModel idle_model;
  int active = 0;  // slots not free
};

class Engine {
 public:
  enum class SlotState : uint32_t { Free = 0, Reserved, Queued, Prefill, Decode, Finished };

  static Result<std::unique_ptr<Engine>> create(std::unique_ptr<Model> model, tokenizer::Tokenizer tok,
                                                const MemoryPlan& plan, const EngineOptions& opts);
  ~Engine();

  const Model& model() const { return *model_; }
  const tokenizer::Tokenizer& tokenizer() const { return tok_; }
  const MemoryPlan& plan() const { return plan_; }
  const EngineOptions& options() const { return opts_; }
  int n_slots() const { return plan_.slots; }
  int ctx() const { return plan_.ctx; }
  // Bytes actually allocated at creation (KV + scratch + sampler + slot state).
  size_t reserved_bytes() const { return region_.size(); }

  void start();  // the engine thread
  void stop();   // finishes the current step, then joins

  // --- client side (any thread) ---
  // Claims a free slot (ref.slot -1: none). Cheap: a scan of atomics.
  SlotRef try_acquire();
  // Claims slot `slot` if it is free (ref.slot -1 otherwise).
  SlotRef try_acquire(int slot);
  // A free slot remembers its last request's tokens and KV until it is
  // reused. How many leading tokens of `prompt` it holds (0 for a slot that
  // is not free). Call only while no one can acquire the slot (admission
  // does, under its lock).
  int cached_prefix(int slot, std::span<const int32_t> prompt) const;
  // Tokens whose KV the slot keeps (any state; for /slots and admission).
  int cached_tokens(int slot) const;
  // When the slot was last released (a counter; lower is older), for LRU.
  uint64_t last_used(int slot) const;
  // The pinned prefix: KV computed once at start for `tokens` (a system
  // prompt every request shares), kept in the plan's pinned region
  // (plan().pinned_tokens positions). Call before start(). Slot 0 holds it
  // too, as its cache.
  Status pin_prefix(std::span<const int32_t> tokens);
  // How many leading tokens of `prompt` the pinned prefix holds.
  int pinned_prefix(std::span<const int32_t> prompt) const;
  int pinned_tokens() const { return static_cast<int>(pinned_.size()); }
  // How many leading tokens of `prompt` slot `slot` could lend by copy: a
  // free slot's cache, a running slot's computed prompt tokens (an estimate
  // for admission, which calls it under its lock; the engine checks again
  // when it copies). 0 for a slot being set up.
  int prefix_in_slot(int slot, std::span<const int32_t> prompt) const;
  // A request of another slot is waiting to copy from this one: it cannot
  // be acquired until the copy is done (within a step).
  bool lending(int slot) const;
  // `f` is called whenever a slot stops lending (its last reader is done
  // or gone): a free slot may then be acquired with no release to say so.
  // It runs on the thread that ended the lending (the engine's, or a
  // client's in submit or release) while that thread holds none of the
  // engine's locks, and must be quick. One listener (admission); an empty
  // `f` removes it, and once that returns `f` is not running nor called again.
  void on_lending_ended(std::function<void()> f);
  // Prompt tokens of the slot's request that were not computed: its own
  // cache and what was copied (final once the request has started).
  int reused_tokens(int slot) const;
  // Copies the prompt into the slot and queues it. The prompt must hold
  // 1..ctx-1 tokens; max_tokens is clamped so prompt + output fit the slot.
  Status submit(SlotRef ref, std::span<const int32_t> prompt, const GenerateParams& p);
  // Blocks until the slot has more than `seen` output tokens, finishes, or
  // the deadline passes. Returns the number of output tokens available.
  int wait_for(int slot, int seen, std::chrono::steady_clock::time_point deadline);
  // Output token i (i < count returned by wait_for) and its logprobs.
  int32_t output_token(int slot, int i) const;
  // logprob of output token i, and fills `top` (top_logprobs entries).
  float output_logprob(int slot, int i, std::span<TokenLogprob> top) const;
  Finish finish(int slot) const;     // None while running
  int prompt_tokens(int slot) const;
  int max_tokens(int slot) const;    // after clamping
  // The engine stops it at the next step; nothing if `ref` is stale.
  void cancel(SlotRef ref);
  // Cancels every running request (drain timeout, shutdown).
  void cancel_all();
  // Ends the request at the next step with the tokens it has, as
  // Finish::Preempted (its slot is wanted by a more urgent request).
  void preempt(SlotRef ref);
  // Gives the slot back. If it is still running it is cancelled first and
  // this waits (at most about one step) for the engine to let go of it; an
  // engine that is stopped or never started cannot, and the request is
  // ended here. Nothing if `ref` is stale (already released): of two
  // releases of one holding at once, one frees the slot, the other does
  // nothing. A slot that was only reserved keeps the cache it had.
  void release(SlotRef ref);
  SlotState state(int slot) const;

  // --- admission inputs ---
  EngineStats stats() const;
  int active_slots() const;
  // Tokens each active slot still has to produce (prefill counted), for Retry-After.
  int min_remaining_tokens() const;
  // Prompt tokens a submitted slot will still have to prefill after the
  // step running now (0 once decoding, and for free or reserved slots).
  int prefill_remaining(int slot) const;
  // Prompt tokens of the slot in the step running now (0: none, or no step).
  int in_step(int slot) const;
  // Seconds until the step running now is predicted to end (0 when none runs).
  double step_left() const;
  // A decoding slot's progress, for admission's step-by-step prediction:
  // output tokens so far (0 before the first), its max_tokens, and seconds
  // since its first token.
  struct Progress {
    int n_out = 0;
    int max_tokens = 0;
    double elapsed = 0;
  };
  Progress progress(int slot) const;
  // The current holding of a slot (its generation); for preemption.
  SlotRef holder(int slot) const;
  // The slot's request has been asked to make way (preempt) and has not yet.
  bool preempt_pending(int slot) const;
  // Submission order of the slot's request (lower was submitted earlier).
  uint64_t submission(int slot) const;
  // Whether the slot's prompt, if still waiting for its first token, is now
  // promoted: its first-token promise has passed (GenerateParams::
  // promote_after_s; prefill_rank, lends_to_prefill).
  bool promoted(int slot) const;

 private:
  struct Slot {
    std::mutex mu;  // guards nothing but the condition variable's wait
    std::condition_variable cv;
    std::atomic<uint32_t> state{0};
    std::atomic<uint32_t> n_out{0};  // published output tokens; futex word for waiters
    // Bumped on every acquire and release; a SlotRef holds the value of its acquire.
    std::atomic<uint64_t> gen{0};
    // The generation to cancel: a stale cancel names an old generation and
    // cannot touch the request that holds the slot now.
    std::atomic<uint64_t> cancel_gen{0};
    std::atomic<uint64_t> preempt_gen{0};  // the same, for preemption
    std::atomic<uint8_t> finish{0};
    int32_t* tokens = nullptr;     // [ctx]: prompt, then output
    TokenLogprob* lp = nullptr;    // [ctx][1 + kMaxTopLogprobs]: per output token
    // Written by submit before the state is published; read by the engine
    // thread and (through the atomics) by admission on any thread.
    int n_prompt = 0;
    int max_tokens = 0;
    std::atomic<int> n_prompt_pub{0}, max_tokens_pub{0};
    uint64_t seq = 0;  // submission order: prompts are prefilled first come, first served
    std::atomic<uint64_t> seq_pub{0};  // the same, for admission
    // When the prompt is promoted (GenerateParams::promote_after_s; 0:
    // never), for the engine and admission.
    std::atomic<std::chrono::steady_clock::rep> promote_at{0};
    // Tokens [0, cached) of `tokens` have their KV in the slot: set at
    // release from n_past (0 when the request asked not to keep it).
    std::atomic<int> cached{0};
    std::atomic<uint64_t> released_at{0};
    // Requests queued to copy this slot's KV rows (GenerateParams::copy_from):
    // while nonzero the slot cannot be acquired, so neither its tokens nor
    // its rows change under the copy.
    std::atomic<int> readers{0};
    std::atomic<int> reused{0};  // see reused_tokens()
    std::chrono::steady_clock::time_point t_first;  // engine thread: when the first token was made
    std::atomic<std::chrono::steady_clock::rep> t_first_pub{0};  // the same, for admission
    // Tokens already in the KV cache: written by the engine, read (relaxed)
    // by admission for Retry-After.
    std::atomic<int> n_past{0};
    // Prompt tokens of this slot in the step running now: cleared before
    // n_past moves past them, so a reader that loads n_past first never
    // subtracts them twice.
    std::atomic<int> in_step{0};
    GenerateParams params;
    Rng rng;
  };

  Engine(std::unique_ptr<Model> m, tokenizer::Tokenizer t) : model_(std::move(m)), tok_(std::move(t)) {}
  void loop();
  // Builds and runs one step; returns false when there was nothing to do.
  bool step_once();
  void finish_slot(Slot& s, Finish f);
  // A queued request starts: copies what its copy_from source holds of its
  // prompt beyond what the slot kept; returns the seconds it took.
  double start_request(int slot);
  // Copies the KV rows [from, to) of every layer from one slot to another.
  void copy_rows(int dst, int src, int from, int to);
  // A request that was to copy slot `src`'s rows no longer will.
  void end_lending(int src);
  bool cancelled(const Slot& s) const { return s.cancel_gen.load() == s.gen.load(); }

  std::unique_ptr<Model> model_;
  tokenizer::Tokenizer tok_;
  MemoryPlan plan_;
  EngineOptions opts_;
  Region region_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Forward> forward_;
  KvView kv_;
  // The pinned prefix: its tokens and their K/V rows, laid out as one more
  // slot of plan_.pinned_tokens positions (KvView).
  std::vector<int32_t> pinned_;
  KvView pinned_kv_;  // n_slots 1, ctx plan_.pinned_tokens
  // One sampler per sampling thread (sampler_threads): a step's rows are
  // drawn at once, lane k of the pool with samplers_[k].
  std::vector<std::unique_ptr<Sampler>> samplers_;
  std::vector<int32_t> drawn_;  // per logits row: its token, drawn in parallel (kNotDrawn: not yet)
  std::unique_ptr<Slot[]> slots_;
  std::vector<BatchToken> batch_;       // capacity reserved once
  std::vector<int> batch_slot_;         // slot of each logits row
  std::vector<TokenLogprob> top_buf_;
  std::vector<int> prefill_order_;      // slots in submission order, capacity reserved once
  std::vector<PrefillFront> prefill_front_;  // per slot: its prompt as this step's prefill sees it
  std::atomic<uint64_t> submit_seq_{0};
  std::atomic<uint64_t> release_seq_{0};
  std::atomic<std::chrono::steady_clock::rep> step_end_{0};  // predicted end of the running step; 0: none

  std::thread thread_;
  std::atomic<bool> running_{false};
  // The engine thread is in loop() and has not made its last pass: only
  // then does a cancelled request get finished by it (release waits for that).
  std::atomic<bool> looping_{false};
  std::mutex listener_mu_;  // held while lending_ended_ is set or called
  std::function<void()> lending_ended_;
  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool wake_ = false;  // set on submit/cancel/stop; the idle engine waits for it
  void wake();
  void calibrate();
  // `alone`: at most one slot was busy (the step also counts for idle_model).
  void record_step(int tokens, int decode_tokens, int prefill_tokens, double seconds, bool alone);

  mutable std::mutex stats_mu_;
  EngineStats stats_;
  // Ring of recent (tokens, seconds) steps for the StepModel fit.
  static constexpr int kSamples = 64;
  StepSample samples_[kSamples] = {};
  int n_samples_ = 0;
  StepSample idle_samples_[kSamples] = {};  // the steps taken alone
  int n_idle_ = 0;
  StepSample calib_[2] = {};
};

}  // namespace edgelm
