// edgelm info -m FILE: what a GGUF model file holds.
#include <fmt/core.h>

#include <map>

#include "core/bytes.h"
#include "engine/memory_plan.h"
#include "gguf/gguf.h"
#include "model/model.h"
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
    fmt::print("file          {} (GGUF v{}, {}, {} tensors, {} metadata keys)\n", *model, f->version(),
               format_bytes(f->file_size()), f->tensors().size(), f->metadata().size());
    int64_t params = 0;
    std::map<std::string_view, std::pair<int, uint64_t>> types;
    for (const auto& t : f->tensors()) {
      auto& e = types[dtype_name(t.type)];
      e.first++;
      e.second += t.nbytes;
      params += t.n_elements();
    }
    fmt::print("tokenizer     {} (pre: {}, {} tokens)\n", f->get_string_or("tokenizer.ggml.model", "none"),
               f->get_string_or("tokenizer.ggml.pre", "default"),
               f->find("tokenizer.ggml.tokens") ? f->find("tokenizer.ggml.tokens")->size() : 0);
    fmt::print("chat template {}\n", f->find("tokenizer.chat_template") ? "present" : "none");
    fmt::print("tensor types\n");
    for (const auto& [name, e] : types)
      fmt::print("  {:<8} {:5} tensors {:>12}\n", name, e.first, format_bytes(e.second));

    const std::string path = *model;
    auto m = Model::from_file(std::move(f).value());
    if (*all) {
      // The file moved into the model on success; reopen for the metadata listing.
      auto again = gguf::File::open(path);
      if (again.ok())
        for (const auto& kv : again->metadata()) fmt::print("  {} = {}\n", kv.key, gguf::format_value(kv.value));
    }
    if (!m.ok()) {
      fmt::print("model         not runnable: {}\n", m.message());
      set_exit_code(1);
      return;
    }
    const ModelConfig& c = (*m)->config;
    fmt::print("architecture  {}{}\n", c.arch_name, c.name.empty() ? "" : fmt::format(" ({})", c.name));
    fmt::print("parameters    {:.2f} M\n", static_cast<double>(params) / 1e6);
    fmt::print("layers        {}\n", c.n_layers);
    fmt::print("embedding     {}\n", c.n_embd);
    fmt::print("heads         {} query, {} key/value, head dim {} (v {})\n", c.n_heads, c.n_kv_heads, c.head_dim,
               c.head_dim_v);
    fmt::print("feed-forward  {}\n", c.n_ff);
    fmt::print("context       {} (trained)\n", c.n_ctx_train);
    fmt::print("vocabulary    {}\n", c.n_vocab);
    fmt::print("rope          base {}, dims {}, {}{}{}\n", c.rope_base, c.rope_dim, c.rope_neox ? "neox" : "normal",
               c.rope_scaling == RopeScaling::Linear ? fmt::format(", linear x{}", c.rope_scale) : "",
               c.has_rope_freqs ? ", frequency factors" : "");
    fmt::print("rms epsilon   {}\n", c.rms_eps);
    fmt::print("output        {}\n", c.tied_output ? "tied to token embedding" : "separate");
    fmt::print("extras        {}{}\n", c.qkv_bias ? "QKV bias " : "", c.qk_norm ? "Q/K norm" : "");
    fmt::print("weights       {} read per token\n", format_bytes((*m)->weights.bytes()));
    fmt::print("KV per token  {} B (f16), {} B (q8_0)\n", kv_bytes_per_token(c, DType::F16),
               kv_bytes_per_token(c, DType::Q8_0));
  });
}

}  // namespace edgelm::tools
