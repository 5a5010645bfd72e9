// The memory plan: what a model, its runtime and its KV cache will cost, to
// the byte, before anything is allocated. `edgelm plan` prints it and
// `edgelm serve` refuses to start when it does not fit; the engine then
// allocates exactly what the plan lists, once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/sysmem.h"
#include "model/config.h"
#include "model/scratch.h"
#include "model/weights.h"

namespace edgelm {

// Most alternatives a request may ask for per output token (OpenAI's limit).
constexpr int kMaxTopLogprobs = 20;

// Bytes each slot keeps besides its KV: the token history (prompt and
// output, ctx x 4 bytes) and a logprob record per output token (the chosen
// token and up to kMaxTopLogprobs alternatives, 8 bytes each), 64-aligned.
uint64_t slot_state_bytes(int ctx);
uint64_t slot_tokens_bytes(int ctx);

// KV cache element types: f16 (default), q8_0 (half the bytes), f32.
Result<DType> parse_kv_type(std::string_view name);

// 2 (K and V) x layers x KV heads x head dim x bytes per element.
uint64_t kv_bytes_per_token(const ModelConfig& c, DType kv_type);

struct Budget {
  uint64_t bytes = 0;
  std::string source;  // how it was found, for the printout
};

// "auto": min(cgroup limit, MemAvailable) less `reserve` (a fraction, e.g. 0.10).
// Otherwise a size such as "2GiB".
Result<Budget> resolve_budget(std::string_view spec, double reserve, const SystemMemory& sys);

struct PlanOptions {
  int slots = 0;         // 0: as many as fit
  int ctx = 0;           // tokens per slot; 0: min(2048, trained context)
  DType kv_type = DType::F16;
  int step_tokens = 256;  // most tokens one forward step processes
  int threads = 1;
  uint64_t extra_bytes = 0;  // fixed costs outside the engine (server buffers)
  std::string extra_label = "server buffers";
  // Positions of the pinned prefix region (a system prompt's KV computed
  // once at start and copied into each request that begins with it).
  int pinned_tokens = 0;
  // The process before any of the above: binary, libraries, parsed
  // metadata and tokenizer tables (measured as the RSS at planning time).
  uint64_t baseline_bytes = 0;
  // Weights are packed for this ISA's kernels (Model::pack_for): counted at
  // their packed size. Unset: as the file stores them.
  std::optional<kernels::Isa> pack_isa;
};

struct MemoryPlan {
  int slots = 0;
  int ctx = 0;
  DType kv_type = DType::F16;
  int step_tokens = 0;
  Budget budget;

  uint64_t weights = 0;        // tensor bytes the forward pass reads (mmapped)
  uint64_t scratch = 0;        // forward-pass buffers (ScratchLayout::total)
  uint64_t sampler = 0;        // candidate buffers for sampling a row of logits, per sampling thread
  uint64_t slot_state = 0;     // slots x slot_state_bytes(ctx)
  uint64_t kv_per_token = 0;
  uint64_t kv_per_slot = 0;
  uint64_t kv = 0;             // slots x ctx x kv_per_token
  int pinned_tokens = 0;
  uint64_t pinned = 0;         // pinned_tokens x kv_per_token
  uint64_t extra = 0;
  std::string extra_label;
  uint64_t baseline = 0;
  uint64_t total = 0;
  ScratchLayout scratch_layout;

  bool fits() const { return total <= budget.bytes; }
  int64_t headroom() const { return static_cast<int64_t>(budget.bytes) - static_cast<int64_t>(total); }
  // When it does not fit: the most slots at this context, and the longest
  // context at this slot count, that would fit (0 when none).
  int max_slots_at_ctx = 0;
  int max_ctx_at_slots = 0;
};

// Threads that sample a step's rows at once, each with its own Sampler: one
// per thread of the engine's pool, at most one per slot.
inline int sampler_threads(int threads, int slots) { return threads < slots ? std::max(threads, 1) : std::max(slots, 1); }

// Builds the plan. With opts.slots == 0 it picks the most slots that fit (at
// least 1, and then `fits()` tells whether even one does).
Result<MemoryPlan> make_plan(const ModelConfig& c, const ModelWeights& w, const PlanOptions& opts,
                             const Budget& budget);

// Human-readable multi-line report and a one-line summary for logs.
std::string format_plan(const MemoryPlan& p);
std::string plan_one_line(const MemoryPlan& p);

}  // namespace edgelm
