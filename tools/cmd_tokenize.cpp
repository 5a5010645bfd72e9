// edgelm tokenize / detokenize.
#include <fmt/core.h>

#include <sstream>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tools/commands.h"

namespace edgelm::tools {

namespace {

Result<tokenizer::Tokenizer> load_tokenizer(const std::string& path) {
  EDGELM_ASSIGN(gguf::File f, gguf::File::open(path));
  return tokenizer::Tokenizer::from_gguf(f);
}

}  // namespace

void add_tokenize_commands(CLI::App& app) {
  {
    auto* cmd = app.add_subcommand("tokenize", "Print the token ids of a text, comma separated");
    auto model = std::make_shared<std::string>();
    auto prompt = std::make_shared<std::string>();
    auto special = std::make_shared<bool>(false);
    auto no_bos = std::make_shared<bool>(false);
    cmd->add_option("-m,--model", *model, "GGUF model or vocabulary file")->required();
    cmd->add_option("-p,--prompt", *prompt, "Text to tokenize")->required();
    cmd->add_flag("--special", *special, "Parse special-token text such as <|im_start|> as special tokens");
    cmd->add_flag("--no-bos", *no_bos, "Do not add BOS/EOS even if the model's metadata asks for them");
    cmd->callback([=] {
      auto tok = load_tokenizer(*model);
      if (!tok.ok()) {
        fmt::print(stderr, "error: {}\n", tok.message());
        set_exit_code(1);
        return;
      }
      auto ids = tok->encode(*prompt, !*no_bos, *special);
      std::string out;
      for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
      fmt::print("{}\n", out);
    });
  }
  {
    auto* cmd = app.add_subcommand("detokenize", "Print the text of comma- or space-separated token ids");
    auto model = std::make_shared<std::string>();
    auto ids_text = std::make_shared<std::string>();
    auto special = std::make_shared<bool>(false);
    cmd->add_option("-m,--model", *model, "GGUF model or vocabulary file")->required();
    cmd->add_option("-t,--tokens", *ids_text, "Token ids, e.g. \"1, 403, 407\"")->required();
    cmd->add_flag("--special", *special, "Render special tokens as their text");
    cmd->callback([=] {
      auto tok = load_tokenizer(*model);
      if (!tok.ok()) {
        fmt::print(stderr, "error: {}\n", tok.message());
        set_exit_code(1);
        return;
      }
      std::vector<int32_t> ids;
      std::string s = *ids_text;
      for (char& c : s)
        if (c == ',' || c == '[' || c == ']') c = ' ';
      std::istringstream in(s);
      std::string word;
      while (in >> word) {
        char* end = nullptr;
        long v = std::strtol(word.c_str(), &end, 10);
        if (*end != '\0' || v < 0 || v >= tok->n_vocab()) {
          fmt::print(stderr, "error: '{}' is not a token id of this vocabulary (0..{})\n", word, tok->n_vocab() - 1);
          set_exit_code(1);
          return;
        }
        ids.push_back(static_cast<int32_t>(v));
      }
      fmt::print("{}\n", tok->decode(ids, !*special));
    });
  }
}

}  // namespace edgelm::tools
