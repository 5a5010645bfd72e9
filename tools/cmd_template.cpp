// edgelm template: the prompt a chat request would be given, exactly.
#include <fmt/core.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gguf/gguf.h"
#include "serve/chat_renderer.h"
#include "serve/prompt.h"
#include "serve/openai.h"
#include "tokenizer/tokenizer.h"
#include "tools/commands.h"

namespace edgelm::tools {

void add_template_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "template",
      "Print the prompt a chat request renders to with the model's chat template (as POST /apply-template): exactly, "
      "nothing added; exit 1 when the template raises or cannot be rendered");
  auto model = std::make_shared<std::string>();
  auto file = std::make_shared<std::string>();
  auto builtin = std::make_shared<std::string>();
  auto messages = std::make_shared<std::string>();
  cmd->add_option("-m,--model", *model, "GGUF model or vocabulary file (its tokenizer.chat_template)")->required();
  cmd->add_option("--chat-template-file", *file, "A Jinja chat template file to use instead of the model's");
  cmd->add_option("--chat-template", *builtin, "A built-in format instead: chatml, llama3, llama2, mistral, zephyr");
  cmd->add_option("--messages", *messages,
                  "JSON file holding a chat request body: {\"messages\": [...], \"tools\": [...], \"add_generation_prompt\": true}")
      ->required();
  cmd->callback([=] {
    auto fail = [](const std::string& what) {
      fmt::print(stderr, "error: {}\n", what);
      set_exit_code(1);
    };
    auto f = gguf::File::open(*model);
    if (!f.ok()) return fail(f.message());
    auto tok = tokenizer::Tokenizer::from_gguf(*f);
    if (!tok.ok()) return fail(tok.message());
    std::ifstream in(*messages, std::ios::binary);
    if (!in) return fail("cannot read " + *messages);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string body = ss.str();
    serve::RequestLimits limits;
    limits.n_vocab = tok->n_vocab();
    auto parsed = serve::parse_chat_request(body, limits);
    if (auto* err = std::get_if<serve::ApiError>(&parsed)) return fail(*messages + ": " + err->message);
    auto choice = serve::ChatRenderer::for_model(*tok, *builtin, *file);
    if (!choice.renderer) return fail(choice.error);
    const serve::GenerationRequest& r = std::get<serve::GenerationRequest>(parsed);
    auto text = choice.renderer->render(r);
    if (!text.ok()) return fail(text.message());
    std::fwrite(text->data(), 1, text->size(), stdout);
  });
}

}  // namespace edgelm::tools
