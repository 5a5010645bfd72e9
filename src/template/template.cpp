#include "template/template.h"

#include "template/lexer.h"
#include "template/parser.h"

namespace edgelm::jinja {

Result<Template> Template::parse(std::string_view source) {
  EDGELM_ASSIGN(auto tokens, tokenize(source));
  EDGELM_ASSIGN(Body body, jinja::parse(tokens));
  Template t;
  t.body_ = std::make_shared<const Body>(std::move(body));
  return t;
}

Result<std::string> Template::render(const Value& context, const RenderOptions& opt) const {
  Interpreter in(opt, context);
  return in.render(*body_);
}

}  // namespace edgelm::jinja
