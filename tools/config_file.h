// edgelm's configuration file: TOML whose keys are a command's long flag
// names, so the file and the command line say the same things the same way:
//
//     model = "/srv/edgelm/qwen2.5-1.5b-instruct-q4_k_m.gguf"
//     slots = 4
//     memory-budget = "1800MiB"     # or memory_budget: '_' and '-' are the same
//     mlock = true
//
// A value fills an option only when the command line left it unset: a flag
// always overrides the file.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "core/status.h"

namespace edgelm::tools {

// What edgelm serve reads when --config is not given, if the file exists.
inline constexpr const char* kDefaultConfigPath = "/etc/edgelm/edgelm.toml";

// Parses the TOML file at `path` (a real TOML parser, toml++: malformed files
// fail with their line and column) and hands each top-level key's value to
// the option of `cmd` with that long name. Unknown keys, tables, and values
// the option rejects (wrong type, out of range) are errors naming the file,
// the line and the key, so a typo cannot silently fall back to a default.
Status apply_config_file(CLI::App& cmd, const std::string& path);

}  // namespace edgelm::tools
