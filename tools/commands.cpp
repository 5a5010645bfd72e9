#include "tools/commands.h"

namespace edgelm::tools {
namespace {
int g_exit_code = 0;
}

int exit_code() { return g_exit_code; }
void set_exit_code(int code) { g_exit_code = code; }

void register_commands(CLI::App& app) {
  add_info_command(app);
  add_plan_command(app);
  add_serve_command(app);
  add_run_command(app);
  add_tokenize_commands(app);
  add_synth_command(app);
  add_bench_command(app);
  add_load_command(app);
  add_template_command(app);
}

}  // namespace edgelm::tools
