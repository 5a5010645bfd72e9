// The edgelm command: one binary, one subcommand per job.
#include <CLI/CLI.hpp>

#include "tools/commands.h"

int main(int argc, char** argv) {
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
