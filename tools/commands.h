// Subcommands of the edgelm binary. Each lives in its own cmd_*.cpp and
// registers itself with the CLI here; the chosen one sets the exit code.
#pragma once

#include <CLI/CLI.hpp>

namespace edgelm::tools {

void register_commands(CLI::App& app);
int exit_code();
void set_exit_code(int code);

void add_info_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_synth_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_tokenize_commands(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_load_command(CLI::App& app);
void add_template_command(CLI::App& app);

}  // namespace edgelm::tools
