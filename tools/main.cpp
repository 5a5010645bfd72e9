// The edgelm command: one binary, one subcommand per job.
#include <CLI/CLI.hpp>
#include <spdlog/cfg/env.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "tools/commands.h"

int main(int argc, char** argv) {
  // Logs go to stderr: stdout carries what a command prints (text, JSON).
  spdlog::set_default_logger(spdlog::stderr_color_mt("edgelm"));
  // SPDLOG_LEVEL=debug adds, among others, one line per engine step.
  spdlog::cfg::load_env_levels();
  CLI::App app{"edgelm: a small-model inference server that holds its memory plan under any load"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "edgelm 0.1.0");
  edgelm::tools::register_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return edgelm::tools::exit_code();
}
