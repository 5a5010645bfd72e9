// edgelm serve: the server. Plans memory, refuses to start if the plan does
// not fit, allocates everything once, then serves until SIGTERM/SIGINT, when
// it drains (refuses new work, lets running requests finish) and exits 0.
#include <fmt/core.h>
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "core/bytes.h"
#include "core/sysmem.h"
#include "engine/engine.h"
#include "serve/server.h"
#include "tools/commands.h"
#include "tools/config_file.h"
#include "tools/options.h"

namespace edgelm::tools {

namespace {

struct ServeFlags {
  PlanFlags plan;
  serve::ServerOptions server;
  std::string truncate = "keep-end";
  bool no_prompt_cache = false;
  std::vector<std::string> classes = {"sensor", "chat"};
  std::vector<std::string> reserve_slots;   // NAME=N
  std::vector<std::string> api_key_class;   // KEY=CLASS
  bool mlock = false;
  double debug_step_ms = 0;
  double debug_token_ms = 0;
};

int serve_main(ServeFlags f) {
  // Signals are taken by one thread with sigwait; every other thread
  // (created after this) inherits the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Freed memory stays in glibc's arenas: two for the process, not one per
  // contended worker (core/sysmem.cpp says what that saved).
  limit_malloc_arenas();

  auto trunc = serve::parse_truncate(f.truncate);
  if (!trunc.ok()) {
    fmt::print(stderr, "error: {}\n", trunc.message());
    return 1;
  }
  f.server.truncate = *trunc;
  f.server.prompt_cache = !f.no_prompt_cache;
  // Priority classes: names in order, reservations, keys.
  auto& adm_classes = f.server.admission.classes;
  adm_classes.clear();
  auto find_class = [&](const std::string& name) -> serve::ClassSpec* {
    for (auto& c : adm_classes)
      if (c.name == name) return &c;
    return nullptr;
  };
  for (const std::string& n : f.classes) {
    if (n.empty() || find_class(n)) {
      fmt::print(stderr, "error: --classes: '{}' is empty or named twice\n", n);
      return 1;
    }
    adm_classes.push_back({n, 0});
  }
  auto split = [](const std::string& s, std::string& a, std::string& b) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == s.size()) return false;
    a = s.substr(0, eq);
    b = s.substr(eq + 1);
    return true;
  };
  int reserved = 0;
  for (const std::string& r : f.reserve_slots) {
    std::string name, count;
    serve::ClassSpec* c = nullptr;
    int n = -1;
    if (split(r, name, count)) {
      c = find_class(name);
      n = std::atoi(count.c_str());
    }
    if (!c || n < 0 || std::to_string(n) != count) {
      fmt::print(stderr, "error: --reserve-slots '{}': expected CLASS=N with a class of --classes ({})\n", r,
                 fmt::join(f.classes, ", "));
      return 1;
    }
    c->reserved = n;
    reserved += n;
  }
  if (f.plan.slots > 0 && reserved >= f.plan.slots) {
    fmt::print(stderr, "error: --reserve-slots reserve {} of {} slots: none would be left for the other classes\n",
               reserved, f.plan.slots);
    return 1;
  }
  for (const std::string& kc : f.api_key_class) {
    std::string key, name;
    if (!split(kc, key, name) || !find_class(name)) {
      fmt::print(stderr, "error: --api-key-class: expected KEY=CLASS with a class of --classes ({})\n",
                 fmt::join(f.classes, ", "));
      return 1;
    }
    f.server.api_key_classes.emplace_back(key, name);
  }
  if (!find_class(f.server.default_class)) {
    fmt::print(stderr, "error: --default-class '{}' is not one of --classes ({})\n", f.server.default_class,
               fmt::join(f.classes, ", "));
    return 1;
  }
  // The default class as an index (the classes before it are urgent) and
  // whether any request can be urgent: the engine's prefill and the gate's
  // checks need both before the server exists.
  serve::resolve_classes(f.server);
  if (const double s = f.server.admission.max_slowdown; s != 0 && s < 1) {
    fmt::print(stderr, "error: --max-slowdown {} is below 1: a stream cannot be promised more than a lone stream's speed (0 turns it off)\n", s);
    return 1;
  }
  spdlog::info("[INIT] loading {}", f.plan.model);
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
  // The pinned system prompt, rendered as the server will render chats.
  f.plan.chat_template = f.server.chat_template;
  f.plan.chat_template_file = f.server.chat_template_file;
  auto pinned = pinned_prefix_from_flags(*tok, f.plan);
  if (!pinned.ok()) {
    fmt::print(stderr, "error: {}\n", pinned.message());
    return 1;
  }
  f.plan.pinned_tokens = static_cast<int>(pinned->size());
  // The HTTP side's buffers are part of the plan; with --slots unset they
  // are sized for the largest slot count the budget could hold.
  const int slots_for_buffers = f.plan.slots > 0 ? f.plan.slots : 64;
  auto plan = plan_from_flags(**model, f.plan, serve::server_buffer_bytes(f.server, slots_for_buffers));
  if (!plan.ok()) {
    fmt::print(stderr, "error: {}\n", plan.message());
    return 1;
  }
  if (!plan->fits()) {
    fmt::print(stderr, "error: the memory plan does not fit the budget; refusing to start\n{}", format_plan(*plan));
    return 2;
  }
  fmt::print(stderr, "{}", format_plan(*plan));
  if (f.server.model_id.empty() || f.server.model_id == "edgelm") {
    std::string name = (*model)->config.name;
    f.server.model_id = name.empty() ? f.plan.model.substr(f.plan.model.find_last_of('/') + 1) : name;
  }
  EngineOptions eo;
  eo.threads = f.plan.threads > 0 ? f.plan.threads : default_threads();
  eo.mlock = f.mlock;
  eo.attn_math = parse_attn_math(f.plan.attn_math).value();  // checked by the flag
  eo.isa = resolve_isa(f.plan.isa).value();  // the plan resolved it already
  // Prefill shares steps with running streams only as far as each step stays
  // within the per-token time the gate promises, so a long prompt never
  // stalls the streams already running.
  serve::keep_promise(f.server.admission, eo);
  eo.min_step_seconds = f.debug_step_ms / 1000.0;
  eo.min_token_seconds = f.debug_token_ms / 1000.0;
  auto engine = Engine::create(std::move(model).value(), std::move(tok).value(), *plan, eo);
  if (!engine.ok()) {
    fmt::print(stderr, "error: {}\n", engine.message());
    return 1;
  }
  Engine& e = **engine;
  if (!pinned->empty()) {
    if (Status st = e.pin_prefix(*pinned); !st.ok()) {
      fmt::print(stderr, "error: {}\n", st.message());
      return 1;
    }
    spdlog::info("[INIT] pinned the system prompt from {}: {} tokens, {} of KV", f.plan.system_prompt_file,
                 pinned->size(), format_bytes(plan->pinned));
  }
  spdlog::info("[INIT] KV reserved: {} for {} slots x {} ({} B/token, {})", format_bytes(plan->kv), plan->slots,
               plan->ctx, plan->kv_per_token, dtype_name(plan->kv_type));
  spdlog::info("[INIT] plan: {}", plan_one_line(*plan));
  const EngineStats st = e.stats();
  spdlog::info("[INIT] {} threads, {} kernels; step time ~ {:.1f} ms + {:.2f} ms/token", eo.threads,
               kernels::isa_name(eo.isa), st.step_model.a * 1e3, st.step_model.b * 1e3);
  e.start();
  serve::Server server(e, f.server);
  if (Status s = server.bind(); !s.ok()) {
    fmt::print(stderr, "error: {}\n", s.message());
    e.stop();
    return 1;
  }
  spdlog::info("[INIT] listening on http://{}:{} (model '{}')", f.server.host, server.port(), f.server.model_id);
  std::thread signals([&] {
    int sig = 0;
    sigwait(&set, &sig);
    spdlog::info("received {}, draining", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    server.drain_and_stop();
  });
  server.run();
  // run() returns after stop(): either drained by the signal thread, or the
  // listener failed. Make sure the signal thread ends either way.
  if (signals.joinable()) {
    pthread_kill(signals.native_handle(), SIGTERM);
    signals.join();
  }
  e.stop();
  spdlog::info("stopped");
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  auto f = std::make_shared<ServeFlags>();
  // --config is added first: CLI11 runs option callbacks in the order they
  // were added, and all of them before it checks required flags, so the file
  // fills the options the command line left unset (flags win) and may give
  // the model. Without --config, the default file is read if it exists.
  auto config_used = std::make_shared<std::string>();
  cmd->add_option_function<std::string>(
         "--config",
         [cmd, config_used](const std::string& given) {
           if (!cmd->parsed() || cmd->get_help_ptr()->count() > 0) return;
           std::error_code ec;
           if (given.empty() && !std::filesystem::is_regular_file(kDefaultConfigPath, ec)) return;
           const std::string path = given.empty() ? kDefaultConfigPath : given;
           if (Status st = apply_config_file(*cmd, path); !st.ok())
             throw CLI::ConfigError("error: " + st.message(), 1);
           *config_used = path;
         },
         fmt::format("TOML file whose keys are these flags' long names; flags override it "
                     "(default: {} if it exists)",
                     kDefaultConfigPath))
      ->force_callback();
  add_plan_flags(cmd, f->plan);
  add_engine_flags(cmd, f->plan);
  add_system_prompt_flags(cmd, f->plan, false);
  auto& s = f->server;
  cmd->add_option("--host", s.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", s.port, "Port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--model-id", s.model_id, "Model name reported by /v1/models (default: from the file)");
  cmd->add_option("--chat-template", s.chat_template,
                  "A built-in chat format instead of the model's template: chatml, llama3, llama2, mistral, zephyr "
                  "(default: the model's own Jinja template; a built-in one recognised from the model when it has none)");
  cmd->add_option("--chat-template-file", s.chat_template_file,
                  "A Jinja chat template file to use instead of the model's own");
  cmd->add_option("--api-key", s.api_key, "Require 'Authorization: Bearer KEY' (except /health and /ready)");
  cmd->add_option("--queue", s.admission.queue, "Requests that may wait for a slot (0: refuse at once)")->capture_default_str()->check(CLI::Range(0, 4096));
  cmd->add_option("--queue-timeout", s.admission.queue_timeout_s, "Seconds a queued request waits before 429")
      ->capture_default_str()->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--min-stream-rate", s.admission.min_stream_rate,
                  "Tokens/s every admitted stream must keep; new requests that would break it get 429 (0: off)")
      ->capture_default_str()->check(CLI::Range(0.0, 10000.0));
  cmd->add_option("--max-slowdown", s.admission.max_slowdown,
                  "Admitted streams keep at least 1/F of a lone stream's tokens/s: longer steps and new requests that "
                  "would break it wait or get 429 (0: off)")
      ->capture_default_str()->check(CLI::Range(0.0, 1000.0));
  cmd->add_option("--max-ttft-slowdown", s.admission.max_ttft_slowdown,
                  "Admit a request only if its predicted time to first token, waiting included, is at most X times "
                  "its unloaded time; else 429 'ttft' (0: off)")
      ->capture_default_str()->check(CLI::Range(0.0, 1000.0));
  cmd->add_option("--max-ttft", s.admission.max_ttft_s,
                  "Admit a request only if its predicted time to first token is at most this many seconds (0: off)")
      ->capture_default_str()->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--ttft-margin-max", s.admission.ttft_margin_max,
                  "The gate plans first tokens with a margin: the largest measured/predicted ratio of the last 32 "
                  "admitted requests, at least 1.15 and at most F (1.15: a fixed margin)")
      ->capture_default_str()->check(CLI::Range(1.0, 10.0));
  cmd->add_option("--truncate", f->truncate, "Prompts longer than a slot: keep-end, keep-start, none (400)")->capture_default_str();
  cmd->add_option("--classes", f->classes,
                  "Priority classes, most urgent first, comma separated (a request's class: --api-key-class, "
                  "X-Priority with --class-header, else --default-class)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--reserve-slots", f->reserve_slots,
                  "CLASS=N: N slots kept for CLASS (and more urgent ones); repeatable");
  cmd->add_option("--default-class", s.default_class, "The class of a request that names none")->capture_default_str();
  cmd->add_flag("--class-header", s.class_header, "Take a request's class from its X-Priority header");
  cmd->add_option("--api-key-class", f->api_key_class,
                  "KEY=CLASS: requests with this API key are of CLASS (the key is also a valid API key); repeatable");
  cmd->add_flag("--preempt", s.admission.preempt,
                "A request that finds no slot ends the youngest stream of a less urgent class (finish_reason "
                "\"preempted\") and takes its slot");
  cmd->add_option_function<double>(
         "--urgent-wait-ms", [&s](double ms) { s.admission.urgent_wait_s = ms / 1000; },
         "When urgent requests can arrive (--class-header, or an API key of a class before --default-class): how "
         "long a step that computes a less urgent prompt may last (an "
         "urgent request arriving meanwhile waits at most this long for it; never less than four one-token "
         "steps); 0: no limit")
      ->default_str("50")
      ->check(CLI::Range(0.0, 60000.0));
  cmd->add_flag("--no-prompt-cache", f->no_prompt_cache,
                "Do not reuse a slot's cached prompt prefix (every prompt is computed in full)");
  cmd->add_option("--default-max-tokens", s.default_max_tokens, "max_tokens when a request gives none")->capture_default_str()->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--max-body", s.max_body_bytes, "Largest request body in bytes")->capture_default_str();
  cmd->add_option("--http-threads", s.http_threads, "HTTP workers (0: max(32, slots + queue + 16))")->capture_default_str();
  cmd->add_option("--http-nice", s.http_nice,
                  "How much lower the HTTP workers' CPU priority is than the engine's (Linux nice, 0-19): a flood "
                  "of requests cannot take the cores the admitted streams need")
      ->capture_default_str()
      ->check(CLI::Range(0, 19));
  cmd->add_option("--max-connections", s.max_connections, "Open connections beyond which new ones get 503 (0: 4 x workers)")->capture_default_str();
  cmd->add_option("--read-timeout", s.read_timeout_s,
                  "Seconds a client has to send a whole request (line, headers and body), from its "
                  "first byte; then it is answered 400 and the connection closes")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--status-seconds", s.status_seconds,
                  "Seconds of per-second history the status page (GET /) keeps: a fixed ring, counted in the plan")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  cmd->add_option("--drain-timeout", s.drain_timeout_s, "Seconds running requests may take after SIGTERM")->capture_default_str();
  cmd->add_option("--pressure-psi", s.memory_pressure_psi, "Memory PSI some avg10 (%) above which new work is refused")->capture_default_str();
  cmd->add_flag("--mlock", f->mlock, "Lock weights and KV cache in RAM");
  cmd->add_option("--debug-step-ms", f->debug_step_ms, "Testing: every engine step takes at least this long ...");
  cmd->add_option("--debug-token-ms", f->debug_token_ms, "Testing: ... plus this long per token in the step");
  cmd->callback([f, config_used] {
    if (!config_used->empty()) spdlog::info("[INIT] config {}", *config_used);
    set_exit_code(serve_main(*f));
  });
}

}  // namespace edgelm::tools
