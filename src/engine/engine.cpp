#include "engine/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/bytes.h"

namespace edgelm {

using Clock = std::chrono::steady_clock;

std::string_view finish_name(Finish f) {
  switch (f) {
    case Finish::None: return "none";
    case Finish::Stop: return "stop";
    case Finish::Length: return "length";
    case Finish::Cancelled: return "cancelled";
    case Finish::Error: return "error";
    case Finish::Preempted: return "preempted";
  }
  return "?";
}

namespace {
constexpr size_t kLpPerToken = 1 + kMaxTopLogprobs;
constexpr int32_t kNotDrawn = std::numeric_limits<int32_t>::min();  // Engine::drawn_: not drawn yet

// How many of the first `n` tokens of `a` and `b` agree (n within both).
int common_prefix(const int32_t* a, const int32_t* b, int n) {
  int i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

Clock::duration clock_span(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}
}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<Model> model, tokenizer::Tokenizer tok,
                                               const MemoryPlan& plan, const EngineOptions& opts) {
  if (!plan.fits()) return make_error("the memory plan does not fit its budget:\n{}", format_plan(plan));
  if (tok.n_vocab() != model->config.n_vocab)
    return make_error("tokenizer has {} tokens but the model has {}", tok.n_vocab(), model->config.n_vocab);
  std::unique_ptr<Engine> e(new Engine(std::move(model), std::move(tok)));
  e->plan_ = plan;
  e->opts_ = opts;
  const ModelConfig& c = e->model_->config;

  // One region holds everything the plan lists beyond the weights and the sampler.
  KvView kv = KvView::make(plan.kv_type, plan.slots, c.n_layers, plan.ctx, c.n_kv_heads, c.head_dim, c.head_dim_v);
  // Exactly the plan's figures: the plan is the allocation.
  const size_t kv_bytes = kv.bytes();
  const size_t scratch_bytes = plan.scratch_layout.total;
  const size_t tokens_bytes = slot_tokens_bytes(plan.ctx);
  const size_t lp_bytes = slot_state_bytes(plan.ctx) - tokens_bytes;
  if (kv_bytes != plan.kv || scratch_bytes != plan.scratch ||
      static_cast<uint64_t>(plan.slots) * (tokens_bytes + lp_bytes) != plan.slot_state)
    return make_error("internal: engine layout disagrees with the memory plan");
  const size_t pinned_bytes = static_cast<size_t>(plan.pinned_tokens) * c.n_layers * kv.row_pair();
  if (pinned_bytes != plan.pinned) return make_error("internal: pinned region disagrees with the memory plan");
  const size_t total = kv_bytes + scratch_bytes + plan.slot_state + pinned_bytes;
  EDGELM_ASSIGN(e->region_, Region::map(total, "KV cache and scratch", opts.mlock));
  // Scratch and slot state first (64-byte multiples), the KV slab last.
  uint8_t* p = e->region_.data();
  uint8_t* scratch = p;
  p += scratch_bytes;
  e->slots_ = std::make_unique<Slot[]>(static_cast<size_t>(plan.slots));
  for (int i = 0; i < plan.slots; ++i) {
    Slot& s = e->slots_[static_cast<size_t>(i)];
    s.tokens = reinterpret_cast<int32_t*>(p);
    p += tokens_bytes;
    s.lp = reinterpret_cast<TokenLogprob*>(p);
    p += lp_bytes;
  }
  kv.base = p;
  e->pinned_kv_ = kv;  // the pinned region after the slab: one slot of pinned_tokens
  e->pinned_kv_.n_slots = 1;
  e->pinned_kv_.ctx = plan.pinned_tokens;
  e->pinned_kv_.base = p + kv_bytes;
  e->kv_ = kv;
  // Every worker owns a slice of the attention scratch: no more workers than
  // the plan made slices for.
  if (std::max(1, opts.threads) > plan.scratch_layout.n_threads)
    return make_error("{} threads, but the memory plan has attention scratch for {}", opts.threads,
                      plan.scratch_layout.n_threads);
  e->pool_ = std::make_unique<ThreadPool>(std::max(1, opts.threads));
  if (opts.pack_weights) {
    EDGELM_ASSIGN(const uint64_t packed, e->model_->pack_for(opts.isa, *e->pool_));
    if (packed > 0)
      spdlog::info("packed {} of weights into the {} kernels' interleaved layout", format_bytes(packed),
                   kernels::isa_name(opts.isa));
  }
  if (opts.mlock) EDGELM_TRY(e->model_->lock_weights());

  e->forward_ = std::make_unique<Forward>(c, e->model_->weights, plan.scratch_layout, scratch, kv, *e->pool_, opts.isa,
                                          opts.attn_math);
  const int sampling = sampler_threads(e->pool_->size(), plan.slots);
  for (int i = 0; i < sampling; ++i) e->samplers_.push_back(std::make_unique<Sampler>(c.n_vocab, opts.isa));
  e->drawn_.assign(static_cast<size_t>(plan.slots), 0);
  e->batch_.reserve(static_cast<size_t>(plan.step_tokens));
  e->batch_slot_.reserve(static_cast<size_t>(plan.slots));
  e->prefill_order_.reserve(static_cast<size_t>(plan.slots));
  e->prefill_front_.assign(static_cast<size_t>(plan.slots), PrefillFront{});
  e->top_buf_.resize(kMaxTopLogprobs);
  e->calibrate();
  return e;
}

Engine::~Engine() { stop(); }

double token_allowance(const StepModel& m, const EngineOptions& o) {
  double cap = o.max_step_seconds > 0 ? o.max_step_seconds : std::numeric_limits<double>::infinity();
  // Planned at 85% of the promise: steps scatter around the fitted line
  // (measured p99 about 1.2x the fit under load), and the promise is a tail figure.
  if (o.max_slowdown > 0 && m.lone_step() > 0) cap = std::min(cap, 0.85 * o.max_slowdown * m.lone_step());
  return cap;
}

int prefill_budget(const StepModel& m, int n_decode, int step_tokens, const EngineOptions& o, double slack,
                   const PrefillFront& front) {
  int budget = std::max(step_tokens - n_decode, 0);
  // At most the prompt tokens that keep the step within `seconds`
  // (predicted), at least min_prefill_chunk. No per-token cost measured
  // yet: a full step only if there is room at all.
  auto within = [&](double seconds) {
    const double room = seconds - m.predict(n_decode);
    // (A millionth of a token of tolerance: the banks are sums of step
    // times, and an even bank may come out a rounding error below zero.)
    const double fit = m.b > 0 ? room / m.b + 1e-6 : (room > 0 ? budget : 0);
    const int fits = static_cast<int>(std::clamp(fit, 0.0, static_cast<double>(budget)));
    budget = std::min(budget, std::max(o.min_prefill_chunk, fits));
  };
  const bool bounded = front.promoted || (o.urgent_classes > 0 && front.cls >= o.urgent_classes);
  // At least four one-token steps long: every step pays the model's fixed
  // cost, and shorter ones would be mostly that on a larger model.
  if (bounded && o.urgent_wait_s > 0 && m.b > 0) within(std::max(o.urgent_wait_s, 4 * m.predict(1)));
  // The step may last its streams' allowance for one token, plus the time
  // they have banked (slack). A stream behind its average (slack < 0: it
  // lent against plain steps that prefill then took) is repaid: the step
  // is shorter than the allowance by its debt, down to min_prefill_chunk.
  const double cap = token_allowance(m, o);
  if (n_decode > 0 && std::isfinite(cap)) within(cap + slack);
  return budget;
}

double stream_bank(const StepModel& m, double allowance, int n_decode, int n_out, int max_tokens, double elapsed) {
  const int done = n_out - 1;  // tokens after the first, each owed `allowance`
  const int horizon = std::max(std::min(max_tokens - 1, done + kDecodeHorizon), done);
  return allowance * horizon - elapsed - (horizon - done) * m.predict(n_decode);
}

void EngineOptions::pad_step(Clock::time_point t0, int tokens) const {
  const double s = min_step_seconds + min_token_seconds * tokens;
  if (s > 0) std::this_thread::sleep_until(t0 + clock_span(s));
}

void Engine::calibrate() {
  // Warm-up steps on slot 0 (its cache is overwritten by the first real
  // prefill): the first pages the weights in and is not counted (it took
  // 25% longer than a warm step, and the fit keeps the calibration points
  // for good); the next two seed the step-time model with a 1-token and a
  // many-token point before any request is measured.
  const int big = std::min({64, plan_.step_tokens, plan_.ctx - 1});
  for (int n : {0, 1, big}) {
    const bool counted = n > 0;
    n = std::max(n, 1);
    batch_.clear();
    for (int i = 0; i < n; ++i) batch_.push_back({tok_.bos() >= 0 ? tok_.bos() : 0, i, 0, i == n - 1});
    auto t0 = Clock::now();
    (void)forward_->step(batch_);
    opts_.pad_step(t0, n);
    const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
    if (counted) calib_[n == 1 ? 0 : 1] = {n, sec};
  }
  batch_.clear();
  record_step(0, 0, 0, 0, true);  // fit from the calibration points alone
}

void Engine::start() {
  if (running_.exchange(true)) return;
  looping_.store(true);
  thread_ = std::thread([this] { loop(); });
}

void Engine::stop() {
  if (!running_.exchange(false)) return;
  wake();
  if (thread_.joinable()) thread_.join();
}

void Engine::wake() {
  {
    std::lock_guard<std::mutex> lk(wake_mu_);
    wake_ = true;
  }
  wake_cv_.notify_one();
}

void Engine::loop() {
  while (running_.load()) {
    if (step_once()) continue;
    std::unique_lock<std::mutex> lk(wake_mu_);
    wake_cv_.wait_for(lk, std::chrono::milliseconds(100), [&] { return wake_ || !running_.load(); });
    wake_ = false;
  }
  // Nothing more will run: finish whatever is in flight so no client waits forever.
  for (int i = 0; i < plan_.slots; ++i) {
    Slot& s = slots_[static_cast<size_t>(i)];
    const auto st = static_cast<SlotState>(s.state.load());
    if (st == SlotState::Queued && s.params.copy_from >= 0) end_lending(s.params.copy_from);
    if (st == SlotState::Queued || st == SlotState::Prefill || st == SlotState::Decode) finish_slot(s, Finish::Cancelled);
  }
  // Releases waiting for this thread to end a request end it themselves now.
  looping_.store(false);
  for (int i = 0; i < plan_.slots; ++i) {
    Slot& s = slots_[static_cast<size_t>(i)];
    { std::lock_guard<std::mutex> lk(s.mu); }
    s.cv.notify_all();
  }
}

SlotRef Engine::try_acquire(int slot) {
  if (slot < 0 || slot >= plan_.slots) return {};
  Slot& s = slots_[static_cast<size_t>(slot)];
  uint32_t expect = static_cast<uint32_t>(SlotState::Free);
  if (!s.state.compare_exchange_strong(expect, static_cast<uint32_t>(SlotState::Reserved))) return {};
  // A request queued to copy from this slot has announced itself (submit
  // raises `readers`, then checks that the slot is not being set up; both
  // sequentially consistent, so at least one side sees the other): back off.
  if (s.readers.load() > 0) {
    s.state.store(static_cast<uint32_t>(SlotState::Free));
    return {};
  }
  // Odd while held, even while free: a running slot's generation is never 0,
  // the cancel word's initial value.
  return {slot, s.gen.fetch_add(1) + 1};
}

SlotRef Engine::try_acquire() {
  for (int i = 0; i < plan_.slots; ++i)
    if (SlotRef r = try_acquire(i); r.ok()) return r;
  return {};
}

Status Engine::submit(SlotRef ref, std::span<const int32_t> prompt, const GenerateParams& p) {
  const int slot = ref.slot;
  if (slot < 0 || slot >= plan_.slots) return make_error("slot {} out of range", slot);
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (s.gen.load() != ref.gen) return make_error("slot {} is held by another request", slot);
  if (s.state.load() != static_cast<uint32_t>(SlotState::Reserved)) return make_error("slot {} is not reserved", slot);
  if (prompt.empty()) return make_error("the prompt is empty");
  if (static_cast<int>(prompt.size()) > plan_.ctx - 1)
    return make_error("prompt of {} tokens does not fit a slot of {} tokens", prompt.size(), plan_.ctx);
  for (int32_t t : prompt)
    if (t < 0 || t >= model_->config.n_vocab) return make_error("token id {} is out of range", t);
  EDGELM_TRY(p.sampling.validate());
  if (p.max_tokens < 1) return make_error("max_tokens must be at least 1, got {}", p.max_tokens);
  if (p.top_logprobs > kMaxTopLogprobs) return make_error("top_logprobs must be at most {}", kMaxTopLogprobs);
  if (p.reuse < 0 || p.reuse >= static_cast<int>(prompt.size()))
    return make_error("reuse of {} tokens for a prompt of {}", p.reuse, prompt.size());
  if (p.reuse > 0 && cached_prefix(slot, prompt) < p.reuse)
    return make_error("slot {} does not hold the first {} tokens of this prompt", slot, p.reuse);
  if (p.copy_from != -1 && p.copy_from != kPinnedPrefix && (p.copy_from < 0 || p.copy_from >= plan_.slots || p.copy_from == slot))
    return make_error("copy_from {} is not another slot", p.copy_from);
  std::copy(prompt.begin(), prompt.end(), s.tokens);
  s.n_prompt = static_cast<int>(prompt.size());
  s.max_tokens = std::min(p.max_tokens, plan_.ctx - s.n_prompt);
  s.n_prompt_pub.store(s.n_prompt, std::memory_order_relaxed);
  s.max_tokens_pub.store(s.max_tokens, std::memory_order_relaxed);
  s.seq = submit_seq_.fetch_add(1);
  s.seq_pub.store(s.seq, std::memory_order_relaxed);
  s.params = p;
  s.promote_at.store(p.promote_after_s > 0 && p.priority > 0
                         ? (Clock::now() + clock_span(p.promote_after_s)).time_since_epoch().count()
                         : 0,
                     std::memory_order_relaxed);
  if (p.copy_from >= 0) {
    // Announce the copy, then make sure the source is not being set up by
    // another request (its tokens would be changing); try_acquire does the
    // mirror image.
    Slot& src = slots_[static_cast<size_t>(p.copy_from)];
    src.readers.fetch_add(1);
    if (src.state.load() == static_cast<uint32_t>(SlotState::Reserved)) {
      end_lending(p.copy_from);
      s.params.copy_from = -1;
    }
  }
  s.rng = Rng(p.sampling.seed);
  s.reused.store(p.reuse, std::memory_order_relaxed);
  s.n_past.store(p.reuse, std::memory_order_relaxed);
  s.cached.store(0, std::memory_order_relaxed);  // being overwritten
  s.n_out.store(0);
  s.finish.store(static_cast<uint8_t>(Finish::None));
  s.state.store(static_cast<uint32_t>(SlotState::Queued), std::memory_order_release);
  wake();
  return Status::Ok();
}

int Engine::wait_for(int slot, int seen, Clock::time_point deadline) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  std::unique_lock<std::mutex> lk(s.mu);
  s.cv.wait_until(lk, deadline, [&] {
    return static_cast<int>(s.n_out.load(std::memory_order_acquire)) > seen || s.finish.load() != 0;
  });
  return static_cast<int>(s.n_out.load(std::memory_order_acquire));
}

int32_t Engine::output_token(int slot, int i) const {
  const Slot& s = slots_[static_cast<size_t>(slot)];
  return s.tokens[s.n_prompt + i];
}

float Engine::output_logprob(int slot, int i, std::span<TokenLogprob> top) const {
  const Slot& s = slots_[static_cast<size_t>(slot)];
  const TokenLogprob* row = s.lp + static_cast<size_t>(i) * kLpPerToken;
  for (size_t k = 0; k < top.size() && k < kMaxTopLogprobs; ++k) top[k] = row[1 + k];
  return row[0].logprob;
}

Finish Engine::finish(int slot) const { return static_cast<Finish>(slots_[static_cast<size_t>(slot)].finish.load()); }
int Engine::prompt_tokens(int slot) const {
  return slots_[static_cast<size_t>(slot)].n_prompt_pub.load(std::memory_order_relaxed);
}
int Engine::max_tokens(int slot) const {
  return slots_[static_cast<size_t>(slot)].max_tokens_pub.load(std::memory_order_relaxed);
}

Engine::SlotState Engine::state(int slot) const {
  return static_cast<SlotState>(slots_[static_cast<size_t>(slot)].state.load());
}

void Engine::cancel(SlotRef ref) {
  if (ref.slot < 0 || ref.slot >= plan_.slots) return;
  Slot& s = slots_[static_cast<size_t>(ref.slot)];
  // Storing the generation (not a flag) makes a stale cancel harmless even
  // if the slot changes hands between this check and the store.
  if (s.gen.load() != ref.gen) return;
  s.cancel_gen.store(ref.gen);
  wake();
}

int Engine::cached_prefix(int slot, std::span<const int32_t> prompt) const {
  if (slot < 0 || slot >= plan_.slots) return 0;
  const Slot& s = slots_[static_cast<size_t>(slot)];
  const auto st = static_cast<SlotState>(s.state.load(std::memory_order_acquire));
  if (st != SlotState::Free && st != SlotState::Reserved) return 0;
  const int n = std::min(s.cached.load(std::memory_order_relaxed), static_cast<int>(prompt.size()));
  return common_prefix(s.tokens, prompt.data(), n);
}

int Engine::cached_tokens(int slot) const { return slots_[static_cast<size_t>(slot)].cached.load(std::memory_order_relaxed); }
uint64_t Engine::last_used(int slot) const {
  return slots_[static_cast<size_t>(slot)].released_at.load(std::memory_order_relaxed);
}

void Engine::preempt(SlotRef ref) {
  if (ref.slot < 0 || ref.slot >= plan_.slots) return;
  Slot& s = slots_[static_cast<size_t>(ref.slot)];
  if (s.gen.load() != ref.gen) return;
  s.preempt_gen.store(ref.gen);
  wake();
}

void Engine::cancel_all() {
  for (int i = 0; i < plan_.slots; ++i) {
    Slot& s = slots_[static_cast<size_t>(i)];
    const uint64_t g = s.gen.load();
    if (g & 1) s.cancel_gen.store(g);
  }
  wake();
}

void Engine::release(SlotRef ref) {
  if (ref.slot < 0 || ref.slot >= plan_.slots) return;
  Slot& s = slots_[static_cast<size_t>(ref.slot)];
  if (s.gen.load() != ref.gen) return;
  const auto st = static_cast<SlotState>(s.state.load());
  const bool submitted = st != SlotState::Reserved;
  if (st == SlotState::Queued || st == SlotState::Prefill || st == SlotState::Decode) {
    cancel(ref);
    std::unique_lock<std::mutex> lk(s.mu);
    // The engine acknowledges within one step. An engine thread that is not
    // looping (never started, or past its last pass) never will: this call
    // ends the request below. Nor is there anything to wait for once
    // another release of this holding has won.
    s.cv.wait(lk, [&] { return s.finish.load() != 0 || s.gen.load() != ref.gen || !looping_.load(); });
  }
  // The holding ends here, once: a second release of it (at the same time,
  // or late) changes nothing, as the slot may already be the next request's.
  uint64_t g = ref.gen;
  if (!s.gen.compare_exchange_strong(g, ref.gen + 1)) return;
  if (submitted && s.finish.load() == 0) {
    // Queued after the engine's last pass (or before it ever started): it
    // never ran, so it still holds its copy source, which must be let go.
    if (s.params.copy_from >= 0) end_lending(s.params.copy_from);
    finish_slot(s, Finish::Cancelled);
  }
  // What the request left in the cache stays for the next one, unless it
  // asked otherwise (or never ran: n_past is then what was reused, still
  // valid). A slot that was only reserved keeps the cache it had.
  if (submitted)
    s.cached.store(s.params.keep_cache ? s.n_past.load(std::memory_order_relaxed) : 0, std::memory_order_relaxed);
  s.params.constraint.reset();  // the engine is done with the slot: the request's automaton goes with it
  s.released_at.store(release_seq_.fetch_add(1) + 1, std::memory_order_relaxed);
  s.state.store(static_cast<uint32_t>(SlotState::Free), std::memory_order_release);
}

void Engine::end_lending(int src) {
  if (slots_[static_cast<size_t>(src)].readers.fetch_sub(1) != 1) return;
  std::lock_guard<std::mutex> lk(listener_mu_);
  if (lending_ended_) lending_ended_();
}

void Engine::on_lending_ended(std::function<void()> f) {
  std::lock_guard<std::mutex> lk(listener_mu_);
  lending_ended_ = std::move(f);
}

Status Engine::pin_prefix(std::span<const int32_t> tokens) {
  if (running_.load()) return make_error("the prefix must be pinned before the engine starts");
  if (static_cast<int>(tokens.size()) > plan_.pinned_tokens)
    return make_error("a pinned prefix of {} tokens, but the memory plan has room for {}", tokens.size(), plan_.pinned_tokens);
  for (int32_t t : tokens)
    if (t < 0 || t >= model_->config.n_vocab) return make_error("token id {} is out of range", t);
  // Computed in slot 0 in steps of the plan's size, as a prompt would be.
  Slot& s0 = slots_[0];
  const int n = static_cast<int>(tokens.size());
  for (int at = 0; at < n;) {
    const int take = std::min(plan_.step_tokens, n - at);
    batch_.clear();
    for (int k = 0; k < take; ++k) batch_.push_back({tokens[static_cast<size_t>(at + k)], at + k, 0, k == take - 1});
    if (auto r = forward_->step(batch_); !r.ok()) return make_error("computing the pinned prefix: {}", r.message());
    at += take;
  }
  batch_.clear();
  copy_positions(pinned_kv_, 0, kv_, 0, 0, n);
  pinned_.assign(tokens.begin(), tokens.end());
  std::copy(tokens.begin(), tokens.end(), s0.tokens);
  s0.cached.store(n, std::memory_order_relaxed);
  return Status::Ok();
}

int Engine::pinned_prefix(std::span<const int32_t> prompt) const {
  return common_prefix(pinned_.data(), prompt.data(), static_cast<int>(std::min(pinned_.size(), prompt.size())));
}

int Engine::prefix_in_slot(int slot, std::span<const int32_t> prompt) const {
  if (slot < 0 || slot >= plan_.slots) return 0;
  const Slot& s = slots_[static_cast<size_t>(slot)];
  const auto st = static_cast<SlotState>(s.state.load(std::memory_order_acquire));
  if (st == SlotState::Free) return cached_prefix(slot, prompt);
  if (st == SlotState::Reserved) return 0;
  // Prompt tokens only: they were written before the state was published,
  // and stay until the slot is acquired again (under admission's lock).
  const int n = std::min({s.n_prompt_pub.load(std::memory_order_relaxed), s.n_past.load(std::memory_order_relaxed),
                          static_cast<int>(prompt.size())});
  return common_prefix(s.tokens, prompt.data(), n);
}

bool Engine::lending(int slot) const { return slots_[static_cast<size_t>(slot)].readers.load() > 0; }

int Engine::reused_tokens(int slot) const {
  return slots_[static_cast<size_t>(slot)].reused.load(std::memory_order_relaxed);
}

void Engine::copy_rows(int dst, int src, int from, int to) {
  if (src == kPinnedPrefix)
    copy_positions(kv_, dst, pinned_kv_, 0, from, to);
  else
    copy_positions(kv_, dst, kv_, src, from, to);
}

double Engine::start_request(int slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  const int src = s.params.copy_from;
  if (src == -1) return 0;
  const auto t0 = Clock::now();
  const int have = s.n_past.load(std::memory_order_relaxed);
  const int limit = s.n_prompt - 1;  // the last prompt token makes the first logits
  int match = 0;
  if (src == kPinnedPrefix) {
    match = std::min(pinned_prefix({s.tokens, static_cast<size_t>(s.n_prompt)}), limit);
  } else {
    Slot& o = slots_[static_cast<size_t>(src)];
    // What the source's KV holds now: a free slot its cache, any other its
    // computed positions (this thread computes them). Its tokens cannot
    // change: `readers` keeps it from being acquired.
    const auto st = static_cast<SlotState>(o.state.load(std::memory_order_acquire));
    const int valid = st == SlotState::Free ? o.cached.load(std::memory_order_relaxed)
                                            : (st == SlotState::Reserved ? 0 : o.n_past.load(std::memory_order_relaxed));
    match = common_prefix(o.tokens, s.tokens, std::min(valid, limit));
  }
  if (match > have) {
    copy_rows(slot, src, have, match);
    s.n_past.store(match, std::memory_order_relaxed);
    s.reused.store(match, std::memory_order_relaxed);
  }
  if (src >= 0) end_lending(src);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void Engine::finish_slot(Slot& s, Finish f) {
  {
    std::lock_guard<std::mutex> lk(s.mu);
    s.finish.store(static_cast<uint8_t>(f));
    s.state.store(static_cast<uint32_t>(SlotState::Finished), std::memory_order_release);
  }
  s.cv.notify_all();
}

int Engine::active_slots() const {
  int n = 0;
  for (int i = 0; i < plan_.slots; ++i) n += slots_[static_cast<size_t>(i)].state.load() != 0;
  return n;
}

int Engine::min_remaining_tokens() const {
  int best = -1;
  for (int i = 0; i < plan_.slots; ++i) {
    const Slot& s = slots_[static_cast<size_t>(i)];
    const auto st = static_cast<SlotState>(s.state.load());
    if (st != SlotState::Queued && st != SlotState::Prefill && st != SlotState::Decode) continue;
    const int rem = std::max(0, s.max_tokens_pub.load(std::memory_order_relaxed) - static_cast<int>(s.n_out.load())) +
                    std::max(0, s.n_prompt_pub.load(std::memory_order_relaxed) - s.n_past.load(std::memory_order_relaxed));
    if (best < 0 || rem < best) best = rem;
  }
  return std::max(best, 0);
}

int Engine::prefill_remaining(int slot) const {
  const Slot& s = slots_[static_cast<size_t>(slot)];
  const auto st = static_cast<SlotState>(s.state.load());
  if (st != SlotState::Queued && st != SlotState::Prefill) return 0;
  const int past = s.n_past.load();
  return std::max(0, s.n_prompt_pub.load(std::memory_order_relaxed) - past - s.in_step.load());
}

int Engine::in_step(int slot) const { return slots_[static_cast<size_t>(slot)].in_step.load(); }

double Engine::step_left() const {
  const auto end = step_end_.load(std::memory_order_relaxed);
  if (end == 0) return 0;
  const Clock::time_point t{Clock::duration{end}};
  return std::max(std::chrono::duration<double>(t - Clock::now()).count(), 0.0);
}

Engine::Progress Engine::progress(int slot) const {
  const Slot& s = slots_[static_cast<size_t>(slot)];
  Progress p;
  // n_out is published (release) after t_first_pub: a count of at least one
  // comes with its time.
  p.n_out = static_cast<int>(s.n_out.load(std::memory_order_acquire));
  p.max_tokens = s.max_tokens_pub.load(std::memory_order_relaxed);
  if (p.n_out > 0) {
    const Clock::time_point t{Clock::duration{s.t_first_pub.load(std::memory_order_relaxed)}};
    p.elapsed = std::max(std::chrono::duration<double>(Clock::now() - t).count(), 0.0);
  }
  return p;
}

bool Engine::preempt_pending(int slot) const {
  const Slot& s = slots_[static_cast<size_t>(slot)];
  return s.preempt_gen.load() == s.gen.load();
}

SlotRef Engine::holder(int slot) const { return {slot, slots_[static_cast<size_t>(slot)].gen.load()}; }

uint64_t Engine::submission(int slot) const {
  return slots_[static_cast<size_t>(slot)].seq_pub.load(std::memory_order_relaxed);
}

bool Engine::promoted(int slot) const {
  const auto at = slots_[static_cast<size_t>(slot)].promote_at.load(std::memory_order_relaxed);
  return at != 0 && Clock::now().time_since_epoch().count() >= at;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lk(stats_mu_);
  EngineStats s = stats_;
  s.active = active_slots();
  return s;
}

namespace {

// Least-squares fit of seconds = a + b * tokens over the calibration points
// (weight 2: they keep the fit defined when every recent step had the same
// size) and a ring of recent steps; `keep` when the fit is not defined.
template <class Sample>
StepModel fit_steps(const Sample (&calib)[2], const Sample* ring, int n, uint64_t count, const StepModel& keep) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  auto add = [&](const Sample& p, double w) {
    if (p.tokens <= 0) return;
    sw += w;
    sx += w * p.tokens;
    sy += w * p.seconds;
    sxx += w * p.tokens * p.tokens;
    sxy += w * p.tokens * p.seconds;
  };
  for (const Sample& c : calib) add(c, 2.0);
  for (int i = 0; i < n; ++i) add(ring[i], 1.0);
  const double den = sw * sxx - sx * sx;
  if (sw <= 0 || den <= 1e-12) return keep;
  const double b = std::max((sw * sxy - sx * sy) / den, 0.0);
  const double a = std::max((sy - b * sx) / sw, 0.0);
  return {a, b, count};
}

}  // namespace

double lone_step_of(std::span<const StepSample> calib, std::span<const StepSample> recent, const StepModel& fit) {
  std::array<double, kLoneStepSamples> one{};  // calibration + a ring of recent steps
  size_t n = 0;
  for (auto part : {calib, recent})
    for (const StepSample& s : part)
      if (s.tokens == 1 && s.seconds > 0 && n < one.size()) one[n++] = s.seconds;
  if (n == 0) return fit.predict(1);
  auto mid = one.begin() + static_cast<std::ptrdiff_t>(n / 2);
  std::nth_element(one.begin(), mid, one.begin() + static_cast<std::ptrdiff_t>(n));
  return *mid;
}

void Engine::record_step(int tokens, int decode_tokens, int prefill_tokens, double seconds, bool alone) {
  static_assert(std::size(decltype(calib_){}) + kSamples <= kLoneStepSamples,
                "lone_step_of would not see every sample");
  std::lock_guard<std::mutex> lk(stats_mu_);
  if (tokens > 0) {
    samples_[n_samples_ % kSamples] = {tokens, seconds};
    ++n_samples_;
    if (alone) idle_samples_[n_idle_++ % kSamples] = {tokens, seconds};
    stats_.steps++;
    if (prefill_tokens == 0) {
      stats_.decode_seconds += seconds;
      const double rate = 1.0 / seconds;  // tokens/s each stream got in this step
      stats_.decode_rate = stats_.decode_rate == 0 ? rate : 0.8 * stats_.decode_rate + 0.2 * rate;
    } else {
      stats_.prefill_seconds += seconds;
      const double rate = prefill_tokens / seconds;
      stats_.prefill_rate = stats_.prefill_rate == 0 ? rate : 0.8 * stats_.prefill_rate + 0.2 * rate;
    }
    stats_.generated_tokens += static_cast<uint64_t>(decode_tokens);
    stats_.prompt_tokens += static_cast<uint64_t>(prefill_tokens);
  }
  stats_.step_model = fit_steps(calib_, samples_, std::min(n_samples_, kSamples),
                                static_cast<uint64_t>(n_samples_), stats_.step_model);
  stats_.idle_model = fit_steps(calib_, idle_samples_, std::min(n_idle_, kSamples),
                                static_cast<uint64_t>(n_idle_), stats_.idle_model);
  // Both promise against the idle one-token step.
  stats_.idle_model.lone =
      lone_step_of(calib_, std::span<const StepSample>(idle_samples_, static_cast<size_t>(std::min(n_idle_, kSamples))),
                   stats_.idle_model);
  stats_.step_model.lone = stats_.idle_model.lone;
}

bool Engine::step_once() {
  batch_.clear();
  batch_slot_.clear();
  const int n_slots = plan_.slots;
  int n_decode = 0;

  // Admit queued requests and act on cancellations.
  double copy_seconds = 0;
  for (int i = 0; i < n_slots; ++i) {
    Slot& s = slots_[static_cast<size_t>(i)];
    auto st = static_cast<SlotState>(s.state.load(std::memory_order_acquire));
    if (st == SlotState::Queued) {
      copy_seconds += start_request(i);
      s.state.store(static_cast<uint32_t>(SlotState::Prefill));
      st = SlotState::Prefill;
    }
    if ((st == SlotState::Prefill || st == SlotState::Decode) && cancelled(s)) finish_slot(s, Finish::Cancelled);
    else if ((st == SlotState::Prefill || st == SlotState::Decode) && s.preempt_gen.load() == s.gen.load())
      finish_slot(s, Finish::Preempted);
  }
  // Every decoding slot contributes its latest token.
  for (int i = 0; i < n_slots; ++i) {
    Slot& s = slots_[static_cast<size_t>(i)];
    if (s.state.load() != static_cast<uint32_t>(SlotState::Decode)) continue;
    const int n_out = static_cast<int>(s.n_out.load());
    batch_.push_back({s.tokens[s.n_prompt + n_out - 1], s.n_past.load(std::memory_order_relaxed), i, true});
    batch_slot_.push_back(i);
    ++n_decode;
  }
  // Then prefill, in chunks: small while streams are running, so their next
  // token is not held up behind a long prompt.
  StepModel m;
  {
    std::lock_guard<std::mutex> lk(stats_mu_);
    m = stats_.step_model;
  }
  // Prompts by priority class, then in the order they were submitted: an
  // earlier request's prompt is never held up by a later one in a lower slot.
  // Promotion (a prompt past its first-token promise) is decided once for
  // the whole step; prefill_rank gives the order.
  prefill_order_.clear();
  for (int i = 0; i < n_slots; ++i)
    if (slots_[static_cast<size_t>(i)].state.load() == static_cast<uint32_t>(SlotState::Prefill)) {
      prefill_order_.push_back(i);
      prefill_front_[static_cast<size_t>(i)] = {slots_[static_cast<size_t>(i)].params.priority, promoted(i)};
    }
  std::sort(prefill_order_.begin(), prefill_order_.end(), [&](int x, int y) {
    const int rx = prefill_rank(prefill_front_[static_cast<size_t>(x)], opts_);
    const int ry = prefill_rank(prefill_front_[static_cast<size_t>(y)], opts_);
    return rx != ry ? rx < ry : slots_[static_cast<size_t>(x)].seq < slots_[static_cast<size_t>(y)].seq;
  });
  // The time the decoding streams have banked: each is promised an average
  // of token_allowance per token over its life (its first DecodeHorizon
  // tokens ahead are counted, so a stream that ends early by end-of-text
  // has not lent out much); what it has not used, less what its remaining
  // plain steps will take, can go to prefill now (one larger step rather
  // than many small ones: the prompt's first token comes sooner at the same
  // cost to the streams).
  double slack = std::numeric_limits<double>::infinity();
  const double allowance = token_allowance(m, opts_);
  const PrefillFront front = prefill_order_.empty() ? PrefillFront{std::numeric_limits<int>::max(), false}
                                                   : prefill_front_[static_cast<size_t>(prefill_order_.front())];
  if (n_decode > 0 && std::isfinite(allowance)) {
    const auto now = Clock::now();
    // Only the streams lends_to_prefill names for the first prompt waiting
    // are asked: less urgent ones may slow beyond their promise for it.
    for (int i : batch_slot_) {
      const Slot& s = slots_[static_cast<size_t>(i)];
      if (!lends_to_prefill(s.params.priority, front, opts_)) continue;
      const double elapsed = std::chrono::duration<double>(now - s.t_first).count();
      slack = std::min(slack, stream_bank(m, allowance, n_decode, static_cast<int>(s.n_out.load()), s.max_tokens, elapsed));
    }
  }
  // (Infinite when no decoding stream is as urgent as the prompt: a full step.)
  int budget = prefill_budget(m, n_decode, plan_.step_tokens, opts_, slack, front);
  int n_prefill = 0;
  for (int i : prefill_order_) {
    if (budget <= 0) break;
    Slot& s = slots_[static_cast<size_t>(i)];
    const int n_past = s.n_past.load(std::memory_order_relaxed);
    const int take = std::min(budget, s.n_prompt - n_past);
    s.in_step.store(take);
    for (int k = 0; k < take; ++k) {
      const int pos = n_past + k;
      const bool last = pos == s.n_prompt - 1;
      batch_.push_back({s.tokens[pos], pos, i, last});
      if (last) batch_slot_.push_back(i);
    }
    budget -= take;
    n_prefill += take;
    // A step in which a prompt ends takes nothing of the prompts behind it:
    // their tokens would delay this one's first token (each costs more than
    // the step's fixed cost it would save them, beyond a few tokens), and
    // the gate promised it a time without them.
    if (n_past + take == s.n_prompt) break;
  }
  if (batch_.empty()) return false;

  const int busy = active_slots();  // 1: this step is what a request alone sees
  const auto t0 = Clock::now();
  step_end_.store((t0 + clock_span(m.predict(static_cast<int>(batch_.size())))).time_since_epoch().count(),
                  std::memory_order_relaxed);
  auto logits = forward_->step(batch_);
  if (opts_.fail_step && opts_.fail_step()) logits = Error{"failed by the fail_step testing aid"};
  step_end_.store(0, std::memory_order_relaxed);
  for (int i : prefill_order_) slots_[static_cast<size_t>(i)].in_step.store(0);
  if (!logits.ok()) {
    spdlog::error("forward step failed: {}", logits.message());
    // Every slot with a token in the failed step: a retry would fail again.
    // Once each, by position in the batch (a slot's tokens are contiguous
    // in it), not by its finish flag: once finished, its client may release
    // the slot and another request take it (finish back to None) before
    // this loop reaches the slot's next token, which must not end the new
    // request.
    int last = -1;
    for (const BatchToken& b : batch_) {
      if (b.slot == last) continue;
      last = b.slot;
      finish_slot(slots_[static_cast<size_t>(b.slot)], Finish::Error);
      if (opts_.after_error_finish) opts_.after_error_finish(b.slot);
    }
    return true;
  }
  opts_.pad_step(t0, static_cast<int>(batch_.size()));
  // Advance the caches.
  // Release: a reader that sees the new n_past also sees in_step's 0 above
  // (prefill_remaining loads n_past first), so a chunk is never subtracted
  // twice.
  for (const BatchToken& b : batch_)
    slots_[static_cast<size_t>(b.slot)].n_past.store(b.pos + 1, std::memory_order_release);

  const int n_vocab = model_->config.n_vocab;
  // Draws row r's token with `sampler` (the slot's own generator: the same
  // token whichever thread draws it).
  auto draw = [&](size_t r, Sampler& sampler) {
    Slot& s = slots_[static_cast<size_t>(batch_slot_[r])];
    const float* row = *logits + r * static_cast<size_t>(n_vocab);
    const int n_out = static_cast<int>(s.n_out.load());
    const int n_seq = s.n_prompt + n_out;
    // Tokens this request may still produce after this one.
    const int left = std::min(s.max_tokens - n_out, plan_.ctx - n_seq) - 1;
    return sampler.sample(row, s.params.sampling, {s.tokens, static_cast<size_t>(n_seq)}, s.rng,
                          s.params.constraint.get(), left);
  };
  // Several rows: drawn at once, one lane per sampler (a 151,936-token row
  // takes 0.1-1 ms to draw, by its truncation). Rows under an output
  // constraint are drawn below, one at a time: a constraint is the
  // request's own, but its checks are not promised to be thread-safe.
  const size_t rows = batch_slot_.size();
  const size_t lanes = std::min(rows, samplers_.size());
  std::fill_n(drawn_.begin(), rows, kNotDrawn);
  if (lanes >= 2) {
    pool_->run(static_cast<int>(lanes), [&](int lane, int) {
      for (size_t r = static_cast<size_t>(lane); r < rows; r += lanes)
        if (slots_[static_cast<size_t>(batch_slot_[r])].params.constraint == nullptr)
          drawn_[r] = draw(r, *samplers_[static_cast<size_t>(lane)]);
    });
  }
  for (size_t r = 0; r < rows; ++r) {
    Slot& s = slots_[static_cast<size_t>(batch_slot_[r])];
    const float* row = *logits + r * static_cast<size_t>(n_vocab);
    const int n_out = static_cast<int>(s.n_out.load());
    const int n_seq = s.n_prompt + n_out;
    TokenConstraint* constraint = s.params.constraint.get();
    const int32_t tok = drawn_[r] != kNotDrawn ? drawn_[r] : draw(r, *samplers_[0]);
    if (tok < 0) {
      spdlog::error("slot {}: the output constraint allows no token", batch_slot_[r]);
      finish_slot(s, Finish::Error);
      continue;
    }
    if ((constraint != nullptr || !s.params.ignore_eos) && tok_.is_eog(tok)) {
      finish_slot(s, Finish::Stop);
      continue;
    }
    if (constraint != nullptr) constraint->accept(tok);
    s.tokens[n_seq] = tok;
    if (s.params.top_logprobs >= 0) {
      TokenLogprob* lp = s.lp + static_cast<size_t>(n_out) * kLpPerToken;
      const std::span<TokenLogprob> top(lp + 1, static_cast<size_t>(s.params.top_logprobs));
      lp[0] = {tok, samplers_[0]->logprobs(row, tok, top)};
    }
    if (n_out == 0) {
      s.t_first = Clock::now();
      s.t_first_pub.store(s.t_first.time_since_epoch().count(), std::memory_order_relaxed);
    }
    {
      std::lock_guard<std::mutex> lk(s.mu);
      // Decode before the count: whoever sees the first token sees the state too.
      if (s.state.load() == static_cast<uint32_t>(SlotState::Prefill))
        s.state.store(static_cast<uint32_t>(SlotState::Decode));
      s.n_out.store(static_cast<uint32_t>(n_out + 1), std::memory_order_release);
    }
    s.cv.notify_all();
    if (constraint != nullptr && constraint->done()) finish_slot(s, Finish::Stop);
    else if (n_out + 1 >= s.max_tokens || n_seq + 1 >= plan_.ctx) finish_slot(s, Finish::Length);
  }
  // Copying rows is part of what this step cost.
  const double sec = std::chrono::duration<double>(Clock::now() - t0).count() + copy_seconds;
  record_step(static_cast<int>(batch_.size()), n_decode + (static_cast<int>(batch_slot_.size()) - n_decode), n_prefill, sec,
              busy <= 1);
  spdlog::debug("step decode={} prefill={} slack_ms={:.1f} predicted_ms={:.1f} took_ms={:.1f}", n_decode, n_prefill,
                1e3 * std::min(slack, 1e6), 1e3 * m.predict(static_cast<int>(batch_.size())), 1e3 * sec);
  return true;
}

}  // namespace edgelm
