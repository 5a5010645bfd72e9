// edgelm load: a load generator for OpenAI-compatible servers (edgelm,
// llama-server, ...). The work is in src/loadgen; this file maps flags to
// LoadOptions and writes the outputs.
#include <fmt/core.h>
#include <signal.h>

#include "loadgen/load.h"
#include "loadgen/plot.h"
#include "loadgen/report.h"
#include "tools/commands.h"

namespace edgelm::tools {

namespace {

struct LoadFlags {
  loadgen::LoadOptions load;
  std::string report, csv, plot;
  bool quiet = false;
};

int load_main(const LoadFlags& f) {
  signal(SIGPIPE, SIG_IGN);
  auto r = loadgen::run_load(f.load);
  if (!r.ok()) {
    fmt::print(stderr, "error: {}\n", r.message());
    return 1;
  }
  const nlohmann::json report = loadgen::report_json(*r);
  if (!f.quiet) fmt::print("{}", loadgen::format_report(report));
  int rc = 0;
  auto write = [&](const std::string& path, const std::string& text) {
    if (path.empty()) return;
    if (Status s = loadgen::write_file(path, text); !s.ok()) {
      fmt::print(stderr, "error: {}\n", s.message());
      rc = 1;
    }
  };
  write(f.report, report.dump(2) + "\n");
  write(f.csv, loadgen::records_csv(*r));
  if (!f.plot.empty()) {
    // A missing gnuplot costs the picture, not the run.
    if (Status s = loadgen::write_plot(*r, f.plot); !s.ok())
      fmt::print(stderr, "warning: {}\n", s.message());
  }
  return rc;
}

}  // namespace

void add_load_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "load", "Load-test an OpenAI-compatible server: status counts, TTFT, TPOT, latency, RSS");
  auto f = std::make_shared<LoadFlags>();
  auto& o = f->load;
  cmd->add_option("--url", o.url, "Server base URL, e.g. http://127.0.0.1:8080")->required();
  cmd->add_option(
         "--clients", o.clients,
         "Closed loop: clients sending back to back. With --rate: the most requests in flight")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--rate", o.rate, "Open loop: Poisson arrivals per second (0: closed loop)")
      ->check(CLI::Range(0.0, 100000.0));
  cmd->add_option("--max-in-flight", o.max_in_flight,
                  "Open loop without --clients: the most requests in flight")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--duration", o.duration_s, "Seconds during which requests start")
      ->capture_default_str();
  cmd->add_option("--prompt-tokens", o.prompt_tokens, "Prompt length in tokens (about)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-tokens", o.max_tokens, "max_tokens of each request (ignore_eos is set)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--stream", o.stream, "Stream (SSE): needed for TTFT and TPOT");
  cmd->add_flag("--chat", o.chat, "Use /v1/chat/completions (default /v1/completions)");
  cmd->add_option("--turns", o.turns,
                  "Conversations (closed loop, --chat): each client holds a chat of N turns, each sending the "
                  "history plus a new user message of --prompt-tokens; TTFT is reported per turn; a 429 is retried "
                  "(the same turn) after its Retry-After, as chat clients do")
      ->check(CLI::Range(0, 1000));
  cmd->add_option("--system-tokens", o.system_tokens,
                  "With --turns: every chat opens with the same system message of about this many tokens")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--model", o.model, "The request's \"model\" field (default: left out)");
  cmd->add_option("--pid", o.pid, "Sample this process's resident memory every 100 ms")
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--timeout", o.timeout_s, "Seconds a request may take in all")
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the prompts and of the arrival times")
      ->capture_default_str();
  cmd->add_option("--report", f->report, "Write the summary as JSON here");
  cmd->add_option("--csv", f->csv, "Write one row per request here");
  cmd->add_option("--plot", f->plot,
                  "Draw memory and latency over time into this PNG (needs gnuplot)");
  cmd->add_flag("-q,--quiet", f->quiet, "Do not print the summary");
  cmd->callback([f] { set_exit_code(load_main(*f)); });
}

}  // namespace edgelm::tools
