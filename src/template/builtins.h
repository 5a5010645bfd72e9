// jinja2's filters and tests (filters.cpp), the methods of str/dict/list a
// sandboxed template may call (methods.cpp), and the global functions
// (globals.cpp: range, namespace, dict, raise_exception, strftime_now).
// Internal to the interpreter.
#pragma once

#include <optional>
#include <string>

#include "core/status.h"
#include "template/interpreter.h"
#include "template/value.h"

namespace edgelm::jinja {

Result<Value> apply_filter(Interpreter& in, const std::string& name, const Value& input, Args& args);
Result<bool> apply_test(Interpreter& in, const std::string& name, const Value& input, Args& args);

// obj.name for a str, dict or list: a bound method (the sandbox's unsafe
// ones, like list.append, fail when called), or nullopt when there is none.
std::optional<Value> method(const Value& obj, const std::string& name);

// The global functions, by name.
void add_globals(Scope& globals);

// Python's `fmt % args` for strings (%s %r %d %i %f %%).
Result<Value> percent_format(Interpreter& in, const Value& fmt, const Value& args);

// Python's `<`: numbers, strings, lists; an error for other pairs.
Result<bool> less_than(const Value& a, const Value& b);

}  // namespace edgelm::jinja
