#include "engine/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/bytes.h"

namespace edgelm {

Result<DType> parse_kv_type(std::string_view name) {
  if (name == "f16" || name == "F16") return DType::F16;
  if (name == "q8_0" || name == "Q8_0") return DType::Q8_0;
  if (name == "f32" || name == "F32") return DType::F32;
  return make_error("unknown KV type '{}' (use f16, q8_0 or f32)", name);
}

uint64_t slot_tokens_bytes(int ctx) { return (static_cast<uint64_t>(ctx) * sizeof(int32_t) + 63) / 64 * 64; }

uint64_t slot_state_bytes(int ctx) {
  const uint64_t lp = static_cast<uint64_t>(ctx) * (1 + kMaxTopLogprobs) * 8;
  return slot_tokens_bytes(ctx) + (lp + 63) / 64 * 64;
}

uint64_t kv_bytes_per_token(const ModelConfig& c, DType kv_type) {
  const uint64_t k = row_bytes(kv_type, c.k_dim());
  const uint64_t v = row_bytes(kv_type, c.v_dim());
  return static_cast<uint64_t>(c.n_layers) * (k + v);
}

Result<Budget> resolve_budget(std::string_view spec, double reserve, const SystemMemory& sys) {
  if (!(reserve >= 0 && reserve < 1)) return make_error("--reserve must be a fraction in [0, 1), got {}", reserve);
  Budget b;
  if (spec != "auto") {
    EDGELM_ASSIGN(b.bytes, parse_bytes(spec));
    b.source = "--memory-budget";
    return b;
  }
  uint64_t avail = sys.mem_available;
  std::string src = fmt::format("MemAvailable {}", format_bytes(sys.mem_available));
  if (sys.cgroup_limit) {
    // Memory already charged to the cgroup is not available to us, except
    // its page cache: clean file pages (a mapped model among them) are
    // reclaimed before anything is killed.
    uint64_t used = sys.cgroup_usage.value_or(0);
    used -= std::min(used, sys.cgroup_file.value_or(0));
    uint64_t room = *sys.cgroup_limit > used ? *sys.cgroup_limit - used : 0;
    if (room < avail || avail == 0) {
      avail = room;
      src = fmt::format("cgroup v{} limit {} less {} in use", sys.cgroup_version, format_bytes(*sys.cgroup_limit),
                        format_bytes(used));
    }
  }
  if (avail == 0) return make_error("cannot determine available memory; pass --memory-budget SIZE");
  b.bytes = static_cast<uint64_t>(static_cast<double>(avail) * (1.0 - reserve));
  b.source = fmt::format("auto: {}, {:.0f}% reserve", src, reserve * 100);
  return b;
}

namespace {

MemoryPlan compute(const ModelConfig& c, const ModelWeights& w, const PlanOptions& o, int slots, int ctx,
                   const Budget& budget) {
  MemoryPlan p;
  p.slots = slots;
  p.ctx = ctx;
  p.kv_type = o.kv_type;
  p.budget = budget;
  p.step_tokens = std::max(1, o.step_tokens);
  p.weights = o.pack_isa ? w.bytes_packed_for(*o.pack_isa) : w.bytes();
  ScratchSpec spec;
  spec.max_tokens = std::max(p.step_tokens, slots);  // every decoding slot fits in one step
  p.step_tokens = spec.max_tokens;
  spec.max_logits = slots;
  spec.n_threads = std::max(1, o.threads);
  p.scratch_layout = plan_scratch(c, w, spec);
  p.scratch = p.scratch_layout.total;
  // Sampling sorts (id, logit) candidates, keeps their probabilities and,
  // under an output constraint, a masked copy of the row (Sampler::bytes_for):
  // one sampler per thread that samples a step's rows (sampler_threads).
  p.sampler = static_cast<uint64_t>(c.n_vocab) * (sizeof(int32_t) + 3 * sizeof(float)) *
              static_cast<uint64_t>(sampler_threads(o.threads, slots));
  p.slot_state = static_cast<uint64_t>(slots) * slot_state_bytes(ctx);
  p.kv_per_token = kv_bytes_per_token(c, o.kv_type);
  p.kv_per_slot = p.kv_per_token * static_cast<uint64_t>(ctx);
  p.kv = p.kv_per_slot * static_cast<uint64_t>(slots);
  p.pinned_tokens = o.pinned_tokens;
  p.pinned = p.kv_per_token * static_cast<uint64_t>(std::max(o.pinned_tokens, 0));
  p.extra = o.extra_bytes;
  p.extra_label = o.extra_label;
  p.baseline = o.baseline_bytes;
  p.total = p.weights + p.scratch + p.sampler + p.slot_state + p.kv + p.pinned + p.extra + p.baseline;
  return p;
}

}  // namespace

Result<MemoryPlan> make_plan(const ModelConfig& c, const ModelWeights& w, const PlanOptions& o, const Budget& budget) {
  if (o.slots < 0 || o.slots > 4096) return make_error("--slots must be between 1 and 4096, got {}", o.slots);
  if (o.ctx < 0 || o.ctx > (1 << 24)) return make_error("--ctx must be between 1 and {}, got {}", 1 << 24, o.ctx);
  if (o.step_tokens < 1 || o.step_tokens > 65536)
    return make_error("--batch must be between 1 and 65536, got {}", o.step_tokens);
  // Each KV head's row is addressed and converted on its own, so each head,
  // not just the whole K/V row, must be a whole number of q8_0 blocks.
  if (o.kv_type == DType::Q8_0 && (c.head_dim % 32 != 0 || c.head_dim_v % 32 != 0))
    return make_error("KV type q8_0 needs head widths that are multiples of 32 (this model: K {}, V {})",
                      c.head_dim, c.head_dim_v);
  const int ctx = o.ctx > 0 ? o.ctx : std::min(2048, c.n_ctx_train);
  if (o.pinned_tokens < 0 || o.pinned_tokens >= ctx)
    return make_error("a pinned prefix of {} tokens does not fit a slot of {} tokens", o.pinned_tokens, ctx);

  MemoryPlan p;
  if (o.slots > 0) {
    p = compute(c, w, o, o.slots, ctx, budget);
  } else {
    // The largest slot count that fits: the total grows monotonically with slots.
    int lo = 1, hi = 4096;
    if (!compute(c, w, o, 1, ctx, budget).fits()) {
      hi = 1;
    } else {
      while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (compute(c, w, o, mid, ctx, budget).fits()) lo = mid;
        else hi = mid - 1;
      }
    }
    p = compute(c, w, o, lo, ctx, budget);
  }
  if (!p.fits()) {
    int s = 0;
    for (int lo = 1, hi = p.slots; lo <= hi;) {
      int mid = lo + (hi - lo) / 2;
      if (compute(c, w, o, mid, ctx, budget).fits()) {
        s = mid;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    p.max_slots_at_ctx = s;
    int best = 0;
    for (int lo = 1, hi = ctx; lo <= hi;) {
      int mid = lo + (hi - lo) / 2;
      if (compute(c, w, o, p.slots, mid, budget).fits()) {
        best = mid;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    p.max_ctx_at_slots = best;
  }
  return p;
}

std::string format_plan(const MemoryPlan& p) {
  std::string s;
  auto line = [&](std::string_view what, uint64_t bytes, std::string detail) {
    s += fmt::format("  {:<16} {:>12}  {}\n", what, format_bytes(bytes), detail);
  };
  s += fmt::format("memory plan: {} slots x {} tokens, KV {}, up to {} tokens per step\n", p.slots, p.ctx,
                   dtype_name(p.kv_type), p.step_tokens);
  line("weights", p.weights, "mmapped tensor data the forward pass reads");
  line("KV cache", p.kv,
       fmt::format("{} B/token x {} tokens x {} slots", p.kv_per_token, p.ctx, p.slots));
  if (p.pinned > 0)
    line("pinned prefix", p.pinned, fmt::format("{} B/token x {} tokens (system prompt)", p.kv_per_token, p.pinned_tokens));
  line("scratch", p.scratch, fmt::format("forward-pass buffers for {} tokens/step", p.step_tokens));
  line("sampler", p.sampler, "candidate buffers and a masked copy of one vocabulary row, per sampling thread");
  line("slot state", p.slot_state, "token history and logprobs per slot");
  if (p.extra > 0)
    line(p.extra_label, p.extra,
         "request bodies and responses of every HTTP worker, and tokenizer calls (upper bound)");
  if (p.baseline > 0) line("process", p.baseline, "binary, libraries, metadata, tokenizer (measured)");
  s += fmt::format("  {:<16} {:>12}\n", "total", format_bytes(p.total));
  s += fmt::format("  {:<16} {:>12}  {}\n", "budget", format_bytes(p.budget.bytes), p.budget.source);
  if (p.fits()) {
    s += fmt::format("  {:<16} {:>12}  fits\n", "headroom", format_bytes(static_cast<uint64_t>(p.headroom())));
  } else {
    s += fmt::format("  {:<16} {:>12}  DOES NOT FIT\n", "over by", format_bytes(static_cast<uint64_t>(-p.headroom())));
    if (p.max_slots_at_ctx > 0)
      s += fmt::format("  would fit: --slots {} at --ctx {}\n", p.max_slots_at_ctx, p.ctx);
    else
      s += fmt::format("  would fit: no slot count at --ctx {}\n", p.ctx);
    if (p.max_ctx_at_slots > 0)
      s += fmt::format("  would fit: --ctx {} at --slots {}\n", p.max_ctx_at_slots, p.slots);
    else
      s += fmt::format("  would fit: no context length at --slots {} (weights and scratch alone exceed the budget)\n",
                       p.slots);
  }
  return s;
}

std::string plan_one_line(const MemoryPlan& p) {
  return fmt::format("weights {} + KV {} ({} slots x {}, {}) + scratch {} + other {} = {} of budget {}",
                     format_bytes(p.weights), format_bytes(p.kv), p.slots, p.ctx, dtype_name(p.kv_type),
                     format_bytes(p.scratch), format_bytes(p.sampler + p.slot_state + p.pinned + p.extra + p.baseline),
                     format_bytes(p.total), format_bytes(p.budget.bytes));
}

}  // namespace edgelm
