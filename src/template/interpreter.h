// Renders a parsed template: jinja2's scoping (a loop iteration, a macro
// call and a block set each get their own scope; `if` does not), its
// Undefined, Python's operators, and the sandbox's refusals. Every render
// is bounded: recursion depth, steps, and the size of any string built.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "template/ast.h"
#include "template/value.h"

namespace edgelm::jinja {

struct RenderOptions {
  // The clock strftime_now() reads, in Unix seconds (formatted as UTC); unset:
  // the system clock, in local time (as transformers' datetime.now()).
  std::optional<int64_t> now_unix;
  size_t max_output_bytes = 16u << 20;  // also bounds any one string or list built
  int max_depth = 400;                  // nested evaluation (macros calling macros, ...)
  // Nodes and expressions evaluated: about a second of work. A real template
  // takes ~15 per message, or ~15 per message pair when it scans backwards
  // from every message (gemma-4: 400 messages ~ 1.2M steps, 0.2 s).
  uint64_t max_steps = 20'000'000;
};

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  const Value* lookup(const std::string& name) const;
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
 public:
  Interpreter(const RenderOptions& opt, const Value& context);
  ~Interpreter();

  Result<std::string> render(const Body& body);

  // Used by the filters, tests and methods.
  Result<Value> call(const Value& fn, Args& args);
  Result<Value> get_attr(const Value& obj, const std::string& name);
  Result<Value> get_item(const Value& obj, const Value& key);
  // Python's iter(): the items of a list/tuple/generator, a dict's keys, a
  // str's characters; nothing for Undefined; an error otherwise.
  Result<std::vector<Value>> iterate(const Value& v);
  // Refuses a string or list about to exceed the output bound.
  Status check_size(size_t n) const;
  // raise_exception() was called: its message is the error, unprefixed.
  void set_raised() { raised_ = true; }
  bool raised() const { return raised_; }
  const RenderOptions& options() const { return opt_; }
  void track_namespace(const Value& ns) { namespaces_.push_back(ns); }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  Result<Flow> exec(const Body& body, const ScopePtr& scope, std::string& out);
  Result<Flow> exec_node(const Node& n, const ScopePtr& scope, std::string& out);
  Result<Flow> exec_for(const Node& n, const ScopePtr& scope, std::string& out);
  Status assign(const Target& t, const Value& v, const ScopePtr& scope, int line);
  Result<Value> eval(const Expr& e, const ScopePtr& scope);
  Result<Value> eval_inner(const Expr& e, const ScopePtr& scope);
  Result<Value> eval_call(const Expr& e, const ScopePtr& scope);
  Result<Args> eval_args(const Expr& e, const ScopePtr& scope, size_t first);
  Result<Value> binary(const std::string& op, const Value& a, const Value& b);
  Result<bool> compare(const std::string& op, const Value& a, const Value& b);
  Result<Value> call_macro(const Node& m, const std::weak_ptr<Scope>& closure, Args& args);
  Value make_macro(const Node& m, const ScopePtr& scope);
  Result<Value> lookup(const std::string& name, const ScopePtr& scope) const;
  Status step();
  // Prefixes "line N: " to an error that does not have a line yet.
  Error at(int line, const Error& e) const;

  const RenderOptions& opt_;
  ScopePtr globals_;
  int depth_ = 0;
  uint64_t steps_ = 0;
  bool raised_ = false;
  std::vector<Value> namespaces_;
};

}  // namespace edgelm::jinja
