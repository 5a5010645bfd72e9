#include "tools/options.h"

#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "core/sysmem.h"
#include "serve/chat_renderer.h"
#include "serve/prompt.h"

namespace edgelm::tools {

void add_plan_flags(CLI::App* cmd, PlanFlags& f, bool model_required) {
  auto* m = cmd->add_option("-m,--model", f.model, "GGUF model file");
  if (model_required) m->required();
  cmd->add_option("--slots", f.slots, "Concurrent sequences (default: as many as the budget holds)")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--ctx", f.ctx, "Tokens per slot (default: min(2048, trained context))")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--kv-type", f.kv_type, "KV cache element type: f16, q8_0, f32")->capture_default_str();
  cmd->add_option("--memory-budget", f.budget,
                  "Hard memory budget, e.g. 2GiB or 2048MiB; 'auto' = min(cgroup limit, MemAvailable) less --reserve")
      ->capture_default_str();
  cmd->add_option("--reserve", f.reserve, "Fraction kept free by the 'auto' budget")->capture_default_str();
  cmd->add_option("--batch", f.batch, "Most tokens in one forward step (prefill chunk budget)")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  cmd->add_option("--threads", f.threads, "Worker threads (default: physical cores)")->check(CLI::Range(0, 1024));
}

void add_system_prompt_flags(CLI::App* cmd, PlanFlags& f, bool template_flags) {
  cmd->add_option("--system-prompt-file", f.system_prompt_file,
                  "A system prompt (the text of the system message) whose KV is computed once at start and kept in a "
                  "pinned region of the plan: every request that begins with it starts from there");
  if (!template_flags) return;
  cmd->add_option("--chat-template", f.chat_template,
                  "With --system-prompt-file: render it with this built-in format (chatml, llama3, ...) as serve would");
  cmd->add_option("--chat-template-file", f.chat_template_file,
                  "With --system-prompt-file: render it with this Jinja template file as serve would");
}

Result<std::vector<int32_t>> pinned_prefix_from_flags(const tokenizer::Tokenizer& tok, const PlanFlags& f) {
  if (f.system_prompt_file.empty()) return std::vector<int32_t>{};
  std::ifstream in(f.system_prompt_file, std::ios::binary);
  if (!in) return make_error("--system-prompt-file {}: cannot read it", f.system_prompt_file);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return make_error("--system-prompt-file {}: read error", f.system_prompt_file);
  // The file's final line break is not part of the prompt (clients send the
  // text without one).
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  serve::ChatRendererChoice c = serve::ChatRenderer::for_model(tok, f.chat_template, f.chat_template_file);
  if (!c.renderer) return make_error("--system-prompt-file needs a chat template: {}", c.error);
  auto tokens = serve::system_prompt_prefix(tok, *c.renderer, text);
  if (!tokens.ok()) return make_error("--system-prompt-file {}: {}", f.system_prompt_file, tokens.message());
  return tokens;
}

void add_engine_flags(CLI::App* cmd, PlanFlags& f) {
  cmd->add_option("--attn-math", f.attn_math,
                  "Attention rounding: f32, or llamacpp (query in the K cache's type, running output in f16 as "
                  "llama.cpp's CPU flash attention does: reproduces its logits for comparison; slower, and less precise over "
                  "long contexts), or rows (f32 one position at a time: the algorithm before the tiled attention, for comparison)")
      ->check(CLI::IsMember({"f32", "llamacpp", "rows"}))
      ->capture_default_str();
  cmd->add_option("--isa", f.isa,
                  "Kernels' instruction set: auto (the best this CPU has), scalar, avx2, avxvnni, avx512, neon; e.g. "
                  "avxvnni to see what an N100 (AVX-VNNI without AVX-512) would do")
      ->check(CLI::IsMember({"auto", "scalar", "avx2", "avxvnni", "avx512", "neon"}))
      ->capture_default_str();
}

Result<kernels::Isa> resolve_isa(const std::string& name) {
  if (name.empty() || name == "auto") return kernels::best_isa();
  std::string have;
  for (kernels::Isa i : kernels::supported_isas()) {
    if (kernels::isa_name(i) == name) return i;
    have += std::string(have.empty() ? "" : ", ") + std::string(kernels::isa_name(i));
  }
  return make_error("--isa {}: this CPU (or build) runs only {}", name, have);
}

int default_threads() {
  // Count distinct (physical id, core id) pairs; fall back to the logical count.
  std::ifstream in("/proc/cpuinfo");
  std::set<std::pair<int, int>> cores;
  std::string line;
  int phys = 0;
  while (std::getline(in, line)) {
    if (line.rfind("physical id", 0) == 0) phys = std::atoi(line.c_str() + line.find(':') + 1);
    if (line.rfind("core id", 0) == 0) cores.insert({phys, std::atoi(line.c_str() + line.find(':') + 1)});
  }
  int n = static_cast<int>(cores.size());
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  return n > 0 ? n : 1;
}

Result<MemoryPlan> plan_from_flags(const Model& m, const PlanFlags& f, uint64_t extra_bytes) {
  EDGELM_ASSIGN(DType kv, parse_kv_type(f.kv_type));
  EDGELM_ASSIGN(Budget budget, resolve_budget(f.budget, f.reserve, read_system_memory()));
  PlanOptions o;
  o.slots = f.slots;
  o.ctx = f.ctx;
  o.kv_type = kv;
  o.step_tokens = f.batch;
  o.threads = f.threads > 0 ? f.threads : default_threads();
  o.extra_bytes = extra_bytes;
  o.pinned_tokens = f.pinned_tokens;
  o.baseline_bytes = current_rss_bytes();
  EDGELM_ASSIGN(const kernels::Isa isa, resolve_isa(f.isa));
  o.pack_isa = isa;  // the engine packs for the ISA it runs
  return make_plan(m.config, m.weights, o, budget);
}

}  // namespace edgelm::tools
