// Chat templates: the subset of Jinja that real chat templates use, rendered
// byte for byte as Python's jinja2 renders them the way Hugging Face
// transformers sets it up (ImmutableSandboxedEnvironment with trim_blocks,
// lstrip_blocks and the loopcontrols extension; globals raise_exception and
// strftime_now; a tojson filter that is json.dumps(ensure_ascii=False, ...)).
//
// API:
//   auto t = Template::parse(text);            // Result<Template>: a syntax error
//                                              // or unsupported feature names its line
//   Value ctx = Value::dict();                 // the variables a template reads:
//   ctx.set("messages", *parse_json(body));    //   messages, tools (None if absent),
//   ctx.set("add_generation_prompt", Value::boolean(true));  // bos_token, eos_token, ...
//   auto text = t->render(ctx, RenderOptions{});  // Result<std::string>
//   A render that raises (raise_exception, an undefined attribute, a type
//   error) is an Error; for raise_exception its message is exactly jinja's.
//   A Template is immutable and cheap to copy; render it from any thread.
//
// Supported:
//   statements  if/elif/else, for (loop.index/index0/revindex/revindex0/first/
//               last/length/previtem/nextitem/cycle, else, `for x in xs if c`,
//               unpacking), set (name, tuple, ns.attr, block set with filters),
//               macro (defaults, keyword args, varargs/kwargs), filter blocks,
//               break/continue, raw,
//               generation; whitespace control {%- -%} {{- -}} {#- -#} and +.
//   expressions literals (str with Python escapes, int, float, bool, none,
//               list, tuple, dict), . and [] access, slices with steps,
//               + - * / // % ** ~, comparisons (chained), in / not in,
//               and/or/not, `a if c else b`, calls, filters, tests.
//   filters     abs attr batch capitalize center count d default dictsort e
//               escape first float forceescape format indent int items join
//               last length list lower map max min reject rejectattr replace
//               reverse round safe select selectattr slice sort string sum
//               title tojson trim truncate unique upper wordcount.
//   tests       defined undefined none string number integer float boolean
//               mapping iterable sequence callable true false odd even
//               divisibleby eq/equalto/== ne/!= lt gt le ge in sameas lower
//               upper escaped filter test.
//   methods     str: strip lstrip rstrip split rsplit splitlines startswith
//               endswith replace upper lower title capitalize find rfind index
//               rindex count join format is*; dict: items keys values get copy;
//               list: count index copy. Mutating methods (list.append,
//               dict.update, ...) fail as jinja2's sandbox refuses them.
//   globals     range (at most 100000, the sandbox's bound), dict, namespace,
//               raise_exception, strftime_now.
// Not supported (an error naming the line): call blocks, recursive loops,
// include/import/extends/block/with/do, and the filters filesizeformat,
// groupby, pprint, random, striptags, urlencode, urlize, wordwrap, xmlattr.
//
// Strings are UTF-8; lengths, indices and slices count code points as Python
// does. Case mapping (upper, lower, title) covers Latin, Greek, Cyrillic and
// Armenian. Printing a generator or a function is an error (Python prints a
// memory address). Integers are 64-bit (overflow is an error).
// Renders are bounded (RenderOptions): output size, nesting depth, steps.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "template/ast.h"
#include "template/interpreter.h"
#include "template/json.h"
#include "template/value.h"

namespace edgelm::jinja {

class Template {
 public:
  static Result<Template> parse(std::string_view source);

  // `context` is a dict of the variables (see above); anything else renders
  // with no variables.
  Result<std::string> render(const Value& context, const RenderOptions& opt = {}) const;

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace edgelm::jinja
