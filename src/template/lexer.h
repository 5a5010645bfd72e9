// Template text to tokens, with jinja2's whitespace rules as Hugging Face
// sets them: trim_blocks (the newline after a block or comment tag goes),
// lstrip_blocks (spaces before a block or comment tag on its own line go),
// `-` on a tag strips all whitespace on that side, `+` keeps it. Newlines
// are normalised to \n and one trailing newline of the template is dropped
// (keep_trailing_newline=False).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace edgelm::jinja {

struct Token {
  enum class Type { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };
  Type type;
  std::string text;  // text, name, operator, the decoded string, or the number's digits
  int line;
};

Result<std::vector<Token>> tokenize(std::string_view source);

}  // namespace edgelm::jinja
