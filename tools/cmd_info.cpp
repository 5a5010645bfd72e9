// edgelm info -m FILE: what a GGUF file holds.
#include <fmt/core.h>

#include <map>

#include "core/bytes.h"
#include "gguf/gguf.h"
#include "tools/commands.h"

namespace edgelm::tools {

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Print a summary of a GGUF model file");
  auto model = std::make_shared<std::string>();
  auto all = std::make_shared<bool>(false);
  cmd->add_option("-m,--model", *model, "GGUF file")->required();
  cmd->add_flag("--metadata", *all, "Also print every metadata key");
  cmd->callback([=] {
    auto f = gguf::File::open(*model);
    if (!f.ok()) {
      fmt::print(stderr, "error: {}\n", f.message());
      set_exit_code(1);
      return;
    }
    fmt::print("file: {} (GGUF v{}, {} tensors, {} metadata keys)\n", *model, f->version(),
               f->tensors().size(), f->metadata().size());
    std::map<std::string_view, std::pair<int, uint64_t>> types;
    for (const auto& t : f->tensors()) {
      auto& e = types[dtype_name(t.type)];
      e.first++;
      e.second += t.nbytes;
    }
    for (const auto& [name, e] : types)
      fmt::print("  {:6} {:4} tensors {:>12}\n", name, e.first, format_bytes(e.second));
    if (*all)
      for (const auto& kv : f->metadata()) fmt::print("  {} = {}\n", kv.key, gguf::format_value(kv.value));
  });
}

}  // namespace edgelm::tools
