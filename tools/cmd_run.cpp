// edgelm run: generate text for one prompt, streaming it to stdout, with
// timing on stderr. It drives the same engine as the server (one slot).
#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "engine/engine.h"
#include "tokenizer/utf8_stream.h"
#include "tools/commands.h"
#include "tools/options.h"

namespace edgelm::tools {

namespace {

struct RunFlags {
  PlanFlags plan;
  std::string prompt;
  int n_predict = 128;
  float temp = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  int64_t seed = -1;
  bool ignore_eos = false;
  bool special = false;
  bool no_echo = false;
};

int run(const RunFlags& f) {
  auto model = Model::load(f.plan.model);
  if (!model.ok()) {
    fmt::print(stderr, "error: {}\n", model.message());
    return 1;
  }
  auto tok = tokenizer::Tokenizer::from_gguf((*model)->file);
  if (!tok.ok()) {
    fmt::print(stderr, "error: {}\n", tok.message());
    return 1;
  }
  PlanFlags pf = f.plan;
  pf.slots = 1;
  auto plan = plan_from_flags(**model, pf);
  if (!plan.ok()) {
    fmt::print(stderr, "error: {}\n", plan.message());
    return 1;
  }
  if (!plan->fits()) {
    fmt::print(stderr, "error: the model does not fit the memory budget\n{}", format_plan(*plan));
    return 2;
  }
  std::vector<int32_t> prompt = tok->encode(f.prompt, true, f.special);
  if (prompt.empty()) {
    fmt::print(stderr, "error: the prompt has no tokens\n");
    return 1;
  }
  if (static_cast<int>(prompt.size()) >= plan->ctx) {
    fmt::print(stderr, "error: the prompt has {} tokens; the context holds {} (raise --ctx)\n", prompt.size(),
               plan->ctx);
    return 1;
  }
  EngineOptions eo;
  eo.threads = pf.threads > 0 ? pf.threads : default_threads();
  eo.attn_math = parse_attn_math(pf.attn_math).value();  // checked by the flag
  eo.isa = resolve_isa(pf.isa).value();  // the plan resolved it already
  auto engine = Engine::create(std::move(model).value(), std::move(tok).value(), *plan, eo);
  if (!engine.ok()) {
    fmt::print(stderr, "error: {}\n", engine.message());
    return 1;
  }
  Engine& e = **engine;
  GenerateParams gp;
  gp.sampling.temperature = f.temp;
  gp.sampling.top_k = f.top_k;
  gp.sampling.top_p = f.top_p;
  gp.sampling.min_p = f.min_p;
  gp.sampling.repeat_penalty = f.repeat_penalty;
  gp.sampling.seed = f.seed >= 0 ? static_cast<uint64_t>(f.seed) : std::random_device{}();
  gp.max_tokens = f.n_predict;
  gp.ignore_eos = f.ignore_eos;
  if (auto st = gp.sampling.validate(); !st.ok()) {
    fmt::print(stderr, "error: {}\n", st.message());
    return 1;
  }
  e.start();
  const SlotRef ref = e.try_acquire();
  const int slot = ref.slot;
  const auto t0 = std::chrono::steady_clock::now();
  if (auto st = e.submit(ref, prompt, gp); !st.ok()) {
    fmt::print(stderr, "error: {}\n", st.message());
    return 1;
  }
  const tokenizer::Tokenizer& t = e.tokenizer();
  tokenizer::Utf8Stream utf8;
  std::string out;
  if (!f.no_echo) {
    // Echo the prompt as its tokens read back, as llama.cpp prints it.
    for (size_t i = 0; i < prompt.size(); ++i) {
      if (i == 0 && prompt[0] == t.bos() && t.add_bos()) continue;
      utf8.push(t.token_piece_view(prompt[i]), out);
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
  }
  int seen = 0;
  std::chrono::steady_clock::time_point t_first{};
  for (;;) {
    const int n = e.wait_for(slot, seen, std::chrono::steady_clock::now() + std::chrono::seconds(1));
    for (; seen < n; ++seen) {
      if (seen == 0) t_first = std::chrono::steady_clock::now();
      out.clear();
      utf8.push(t.token_piece_view(e.output_token(slot, seen)), out);
      std::fwrite(out.data(), 1, out.size(), stdout);
    }
    std::fflush(stdout);
    if (e.finish(slot) != Finish::None && seen == e.wait_for(slot, seen, std::chrono::steady_clock::now())) break;
  }
  const auto t_end = std::chrono::steady_clock::now();
  out.clear();
  utf8.flush(out);
  out += "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  const Finish fin = e.finish(slot);
  e.release(ref);
  e.stop();
  using secs = std::chrono::duration<double>;
  const double prompt_s = seen > 0 ? secs(t_first - t0).count() : secs(t_end - t0).count();
  const double gen_s = secs(t_end - t_first).count();
  fmt::print(stderr, "\nprompt: {} tokens, {:.1f} tokens/s | generated: {} tokens, {:.1f} tokens/s | finish: {}\n",
             prompt.size(), prompt.size() / std::max(prompt_s, 1e-9), seen,
             seen > 1 ? (seen - 1) / std::max(gen_s, 1e-9) : 0.0, finish_name(fin));
  return fin == Finish::Error ? 1 : 0;
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Generate text for one prompt (streams to stdout, timing to stderr)");
  auto f = std::make_shared<RunFlags>();
  add_plan_flags(cmd, f->plan);
  add_engine_flags(cmd, f->plan);
  cmd->add_option("-p,--prompt", f->prompt, "Prompt text")->required();
  cmd->add_option("-n,--n-predict", f->n_predict, "Tokens to generate")->capture_default_str()->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--temp", f->temp, "Temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", f->top_k, "Top-k (0: off)")->capture_default_str();
  cmd->add_option("--top-p", f->top_p, "Top-p (1: off)")->capture_default_str();
  cmd->add_option("--min-p", f->min_p, "Min-p (0: off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", f->repeat_penalty, "Repetition penalty (1: off)")->capture_default_str();
  cmd->add_option("--seed", f->seed, "Sampling seed (default: random)");
  cmd->add_flag("--ignore-eos", f->ignore_eos, "Keep generating past end-of-generation tokens");
  cmd->add_flag("--special", f->special, "Parse special-token text in the prompt");
  cmd->add_flag("--no-echo", f->no_echo, "Do not print the prompt before the generated text");
  cmd->callback([f] { set_exit_code(run(*f)); });
}

}  // namespace edgelm::tools
