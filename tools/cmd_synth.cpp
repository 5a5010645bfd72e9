// edgelm synth: write a synthetic model of a real shape (weights are noise).
#include <fmt/core.h>

#include "core/bytes.h"
#include "model/synth.h"
#include "tools/commands.h"
#include "tools/options.h"

#include <filesystem>

namespace edgelm::tools {

void add_synth_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("synth", "Write a synthetic GGUF model of a real architecture and shape");
  auto o = std::make_shared<SynthOptions>();
  std::string shapes, types;
  for (const auto& s : known_shapes()) shapes += (shapes.empty() ? "" : ", ") + std::string(s.name);
  for (auto t : known_ftypes()) types += (types.empty() ? "" : ", ") + std::string(t);
  auto* arch = cmd->add_option("--arch", "Architecture (checked against the shape): llama, qwen2, qwen3");
  cmd->add_option("--shape", o->shape, "Shape: " + shapes)->required();
  cmd->add_option("--type", o->ftype, "Quantization mix: " + types)->capture_default_str();
  cmd->add_option("--vocab", o->vocab, "GGUF whose tokenizer is copied (e.g. ggml-vocab-qwen2.gguf); "
                                       "default: a small built-in byte vocabulary");
  cmd->add_option("-o,--output", o->output, "Output file")->required();
  cmd->add_option("--seed", o->seed, "Weight seed")->capture_default_str();
  cmd->add_option("--threads", o->threads, "Threads for quantizing")->capture_default_str();
  cmd->callback([=] {
    auto shape = find_shape(o->shape);
    if (!shape.ok()) {
      fmt::print(stderr, "error: {}\n", shape.message());
      set_exit_code(1);
      return;
    }
    if (arch->count() > 0 && arch->as<std::string>() != arch_label(shape->arch)) {
      fmt::print(stderr, "error: shape '{}' is a {} model, not {}\n", o->shape, arch_label(shape->arch),
                 arch->as<std::string>());
      set_exit_code(1);
      return;
    }
    SynthOptions opts = *o;
    if (opts.threads <= 0) opts.threads = default_threads();
    auto params = write_synthetic_model(opts);
    if (!params.ok()) {
      fmt::print(stderr, "error: {}\n", params.message());
      set_exit_code(1);
      return;
    }
    std::error_code ec;
    const auto size = std::filesystem::file_size(o->output, ec);
    fmt::print("wrote {}: {} {} {:.1f} M parameters, {} (synthetic weights: the text is noise)\n", o->output,
               o->shape, o->ftype, static_cast<double>(*params) / 1e6, format_bytes(ec ? 0 : size));
  });
}

}  // namespace edgelm::tools
