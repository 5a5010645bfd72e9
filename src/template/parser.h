// Tokens to the template tree. Anything outside the supported subset (an
// unknown tag, `recursive` loops, `call` blocks, an unknown filter outside an
// `if`) is an error naming the line, as jinja2 reports it at compile time.
#pragma once

#include <vector>

#include "core/status.h"
#include "template/ast.h"
#include "template/lexer.h"

namespace edgelm::jinja {

// Nesting of expressions and blocks a template may have.
inline constexpr int kMaxParseDepth = 256;

Result<Body> parse(const std::vector<Token>& tokens);

// Names of the filters and tests jinja2 (with the chat-template additions)
// knows, and whether this interpreter implements them.
enum class Support { kUnknown, kUnsupported, kSupported };
Support filter_support(const std::string& name);
Support test_support(const std::string& name);

}  // namespace edgelm::jinja
