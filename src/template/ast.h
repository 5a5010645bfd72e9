// The parsed template: expression and statement trees. Built once by the
// parser, read (never modified) by every render.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/value.h"

namespace edgelm::jinja {

// The variable a filter block's or set block's filter chain reads the
// rendered body from (a name no template can spell).
inline constexpr const char* kBlockVar = "\x01block";

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // value
    kName,     // name
    kAttr,     // args[0].name
    kItem,     // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]] (null parts are absent)
    kCall,     // args[0](args[1..], kwargs)
    kFilter,   // args[0] | name(args[1..], kwargs)
    kTest,     // args[0] is [not] name(args[1..])
    kUnary,    // name in {"-", "+", "not"} applied to args[0]
    kBinary,   // args[0] name args[1]: + - * / // % ** ~ and or in notin
    kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ... (chained)
    kCond,     // args[1] if args[0] else args[2] (args[2] may be null)
    kList,
    kTuple,
    kDict,  // args: key, value, key, value, ...
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare
  bool negated = false;          // kTest: "is not"
  bool known = true;             // kFilter/kTest: the name exists (else an error when evaluated)
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

// An assignment target: a name, a tuple of names, or ns.attr.
struct Target {
  std::vector<std::string> names;  // one, or several to unpack
  bool tuple = false;
  std::string attr;  // set ns.attr: names[0] is the namespace
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Node {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // conds[i] -> bodies[i]; else_body
    kFor,          // for target in expr [if filter]: body; else_body
    kSet,          // set target = expr
    kSetBlock,     // set target [| filters] %}body{% endset
    kMacro,        // macro name(params): body
    kCallBlock,    // call[(params)] expr: body
    kFilterBlock,  // filter f %}body{% endfilter
    kBreak,
    kContinue,
    kScope,  // generation/endgeneration: renders its body
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;  // for ... if filter; set-block / filter-block: a filter chain applied to a placeholder
  Target target;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::string name;
  std::vector<MacroParam> params;
  // A macro whose body reads `varargs` / `kwargs` takes extra positional /
  // keyword arguments into them (as jinja2 decides, from the names used).
  bool catch_varargs = false;
  bool catch_kwargs = false;
};

}  // namespace edgelm::jinja
