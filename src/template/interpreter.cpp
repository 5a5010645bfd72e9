#include "template/interpreter.h"

#include <cmath>

#include "template/builtins.h"
#include "template/pystr.h"

namespace edgelm::jinja {

namespace {

struct DepthGuard {
  int& d;
  explicit DepthGuard(int& x) : d(++x) {}
  ~DepthGuard() { --d; }
};

bool has_line(const Error& e) { return e.message.rfind("line ", 0) == 0; }

std::string undefined_message(const Value& v) {
  return v.str().empty() ? std::string("value is undefined") : v.str();
}

// Python index (negative counts from the end); nullopt when out of range.
std::optional<size_t> py_index(int64_t i, size_t n) {
  if (i < 0) i += static_cast<int64_t>(n);
  if (i < 0 || i >= static_cast<int64_t>(n)) return std::nullopt;
  return static_cast<size_t>(i);
}

// Python's slice.indices(): the positions a[start:stop:step] selects.
Result<std::vector<size_t>> slice_positions(size_t n, const Value& start, const Value& stop, const Value& step) {
  auto num = [](const Value& v, int64_t dflt) -> Result<int64_t> {
    if (v.is_none() || v.is_undefined()) return dflt;
    if (v.is_int() || v.is_bool()) return v.as_int();
    return make_error("slice indices must be integers or None");
  };
  EDGELM_ASSIGN(int64_t st, num(step, 1));
  if (st == 0) return make_error("slice step cannot be zero");
  const auto len = static_cast<int64_t>(n);
  auto clamp = [&](int64_t v) {
    if (v < 0) v += len;
    return st > 0 ? std::clamp<int64_t>(v, 0, len) : std::clamp<int64_t>(v, -1, len - 1);
  };
  int64_t b, e;
  if (start.is_none() || start.is_undefined()) {
    b = st > 0 ? 0 : len - 1;
  } else {
    EDGELM_ASSIGN(int64_t x, num(start, 0));
    b = clamp(x);
  }
  if (stop.is_none() || stop.is_undefined()) {
    e = st > 0 ? len : -1;
  } else {
    EDGELM_ASSIGN(int64_t x, num(stop, 0));
    e = clamp(x);
  }
  // Counted, so a huge step cannot overflow.
  const uint64_t stride = st > 0 ? static_cast<uint64_t>(st) : 0 - static_cast<uint64_t>(st);
  const uint64_t span = st > 0 ? (b < e ? static_cast<uint64_t>(e - b) : 0) : (b > e ? static_cast<uint64_t>(b - e) : 0);
  const uint64_t count = span == 0 ? 0 : (span - 1) / stride + 1;
  std::vector<size_t> pos;
  pos.reserve(count);
  for (uint64_t k = 0; k < count; ++k)
    pos.push_back(st > 0 ? static_cast<size_t>(b) + k * stride : static_cast<size_t>(b) - k * stride);
  return pos;
}

Result<int64_t> checked(int64_t a, int64_t b, char op) {
  int64_t r = 0;
  bool over = false;
  switch (op) {
    case '+': over = __builtin_add_overflow(a, b, &r); break;
    case '-': over = __builtin_sub_overflow(a, b, &r); break;
    case '*': over = __builtin_mul_overflow(a, b, &r); break;
  }
  if (over) return make_error("integer overflow (edgelm's integers are 64-bit)");
  return r;
}

int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t pymod(int64_t a, int64_t b) {
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

const Value* Scope::lookup(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

Interpreter::Interpreter(const RenderOptions& opt, const Value& context) : opt_(opt) {
  globals_ = std::make_shared<Scope>();
  add_globals(*globals_);
  if (context.is_dict())
    for (const auto& [k, v] : context.dict_data().items)
      if (k.is_string()) globals_->vars[k.str()] = v;
}

Interpreter::~Interpreter() {
  // A namespace can hold itself (ns.x = ns): break such cycles.
  for (auto& ns : namespaces_) {
    ns.namespace_data().items.clear();
    ns.namespace_data().str_index.clear();
  }
}

Error Interpreter::at(int line, const Error& e) const {
  if (raised_ || has_line(e)) return e;
  return make_error("line {}: {}", line, e.message);
}

Status Interpreter::step() {
  if (++steps_ > opt_.max_steps) return make_error("template ran more than {} steps", opt_.max_steps);
  return {};
}

Status Interpreter::check_size(size_t n) const {
  if (n > opt_.max_output_bytes) return make_error("template output exceeds {} bytes", opt_.max_output_bytes);
  return {};
}

Result<std::string> Interpreter::render(const Body& body) {
  auto root = std::make_shared<Scope>();
  root->parent = globals_;
  std::string out;
  auto r = exec(body, root, out);
  if (!r.ok()) return r.error();
  return out;
}

Result<Interpreter::Flow> Interpreter::exec(const Body& body, const ScopePtr& scope, std::string& out) {
  DepthGuard g(depth_);
  if (depth_ > opt_.max_depth) return make_error("template nesting deeper than {}", opt_.max_depth);
  for (const auto& n : body) {
    EDGELM_ASSIGN(Flow f, exec_node(*n, scope, out));
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Result<Interpreter::Flow> Interpreter::exec_node(const Node& n, const ScopePtr& scope, std::string& out) {
  EDGELM_TRY(step());
  switch (n.kind) {
    case Node::Kind::kText:
      out += n.text;
      EDGELM_TRY(check_size(out.size()));
      return Flow::kNormal;
    case Node::Kind::kOutput: {
      EDGELM_ASSIGN(Value v, eval(*n.expr, scope));
      // Python prints these with a memory address: nothing to match.
      if (v.is_list() && v.seq() == Value::Seq::kGenerator)
        return make_error("line {}: printing a generator (add |list)", n.line);
      if (v.is_callable()) return make_error("line {}: printing a function (call it?)", n.line);
      if (!append_str(out, v)) return make_error("line {}: value nested too deeply to print", n.line);
      EDGELM_TRY(check_size(out.size()));
      return Flow::kNormal;
    }
    case Node::Kind::kIf:
      for (size_t i = 0; i < n.conds.size(); ++i) {
        EDGELM_ASSIGN(Value c, eval(*n.conds[i], scope));
        if (c.truthy()) return exec(n.bodies[i], scope, out);
      }
      return exec(n.else_body, scope, out);
    case Node::Kind::kFor: return exec_for(n, scope, out);
    case Node::Kind::kSet: {
      EDGELM_ASSIGN(Value v, eval(*n.expr, scope));
      EDGELM_TRY(assign(n.target, v, scope, n.line));
      return Flow::kNormal;
    }
    case Node::Kind::kSetBlock:
    case Node::Kind::kFilterBlock: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      std::string text;
      EDGELM_TRY(exec(n.body, inner, text));
      Value v = Value::string(std::move(text));
      if (n.filter) {
        inner->vars[kBlockVar] = v;
        EDGELM_ASSIGN(v, eval(*n.filter, inner));
      }
      if (n.kind == Node::Kind::kSetBlock) {
        EDGELM_TRY(assign(n.target, v, scope, n.line));
      } else {
        if (!append_str(out, v)) return make_error("line {}: value nested too deeply to print", n.line);
        EDGELM_TRY(check_size(out.size()));
      }
      return Flow::kNormal;
    }
    case Node::Kind::kMacro: scope->vars[n.name] = make_macro(n, scope); return Flow::kNormal;
    case Node::Kind::kScope: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      return exec(n.body, inner, out);
    }
    case Node::Kind::kBreak: return Flow::kBreak;
    case Node::Kind::kContinue: return Flow::kContinue;
    case Node::Kind::kCallBlock: return make_error("line {}: call blocks are not supported", n.line);
  }
  return Flow::kNormal;
}

Status Interpreter::assign(const Target& t, const Value& v, const ScopePtr& scope, int line) {
  if (!t.attr.empty()) {
    const Value* ns = scope->lookup(t.names[0]);
    if (!ns || !ns->is_namespace())
      return make_error("line {}: cannot assign attribute on non-namespace object", line);
    if (v.depth() > kMaxValueDepth) return make_error("line {}: value nested deeper than {}", line, kMaxValueDepth);
    ns->namespace_data().set(Value::string(t.attr), v);
    return {};
  }
  if (!t.tuple) {
    scope->vars[t.names[0]] = v;
    return {};
  }
  auto items = iterate(v);
  if (!items.ok()) return at(line, items.error());
  if (items->size() < t.names.size())
    return make_error("line {}: not enough values to unpack (expected {}, got {})", line, t.names.size(),
                      items->size());
  if (items->size() > t.names.size())
    return make_error("line {}: too many values to unpack (expected {})", line, t.names.size());
  for (size_t i = 0; i < t.names.size(); ++i) scope->vars[t.names[i]] = (*items)[i];
  return {};
}

Result<Interpreter::Flow> Interpreter::exec_for(const Node& n, const ScopePtr& scope, std::string& out) {
  EDGELM_ASSIGN(Value seq, eval(*n.expr, scope));
  auto all = iterate(seq);
  if (!all.ok()) return at(n.line, all.error());
  std::vector<Value> items;
  if (n.filter) {
    for (auto& item : *all) {
      auto fs = std::make_shared<Scope>();
      fs->parent = scope;
      EDGELM_TRY(assign(n.target, item, fs, n.line));
      EDGELM_ASSIGN(Value keep, eval(*n.filter, fs));
      if (keep.truthy()) items.push_back(std::move(item));
    }
  } else {
    items = std::move(*all);
  }
  if (items.empty()) {
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    EDGELM_TRY(exec(n.else_body, inner, out));
    return Flow::kNormal;
  }
  const auto len = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < len; ++i) {
    EDGELM_TRY(step());
    auto it = std::make_shared<Scope>();
    it->parent = scope;
    EDGELM_TRY(assign(n.target, items[static_cast<size_t>(i)], it, n.line));
    Value loop = Value::dict();
    loop.set("index", Value::integer(i + 1));
    loop.set("index0", Value::integer(i));
    loop.set("revindex", Value::integer(len - i));
    loop.set("revindex0", Value::integer(len - i - 1));
    loop.set("first", Value::boolean(i == 0));
    loop.set("last", Value::boolean(i == len - 1));
    loop.set("length", Value::integer(len));
    loop.set("depth", Value::integer(1));
    loop.set("depth0", Value::integer(0));
    loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item"));
    loop.set("nextitem", i + 1 < len ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item"));
    loop.set("cycle", Value::function("loop.cycle", [i](Interpreter&, Args& a) -> Result<Value> {
               if (a.pos.empty()) return make_error("no items for cycling given");
               return a.pos[static_cast<size_t>(i) % a.pos.size()];
             }));
    it->vars["loop"] = std::move(loop);
    EDGELM_ASSIGN(Flow f, exec(n.body, it, out));
    if (f == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Value Interpreter::make_macro(const Node& m, const ScopePtr& scope) {
  // The macro sees the scope it was defined in, as it is when called. It
  // holds that scope weakly: the scope holds the macro.
  std::weak_ptr<Scope> closure = scope;
  const Node* node = &m;
  return Value::function("macro '" + m.name + "'", [node, closure](Interpreter& in, Args& a) {
    return in.call_macro(*node, closure, a);
  });
}

Result<Value> Interpreter::call_macro(const Node& m, const std::weak_ptr<Scope>& closure, Args& args) {
  DepthGuard g(depth_);
  if (depth_ > opt_.max_depth) return make_error("template nesting deeper than {}", opt_.max_depth);
  auto parent = closure.lock();
  if (!parent) return make_error("macro '{}' called after its scope ended", m.name);
  auto scope = std::make_shared<Scope>();
  scope->parent = parent;
  if (args.pos.size() > m.params.size() && !m.catch_varargs)
    return make_error("macro '{}' takes not more than {} argument(s)", m.name, m.params.size());
  std::vector<bool> given(m.params.size(), false);
  std::vector<Value> extra_pos;
  for (size_t i = 0; i < args.pos.size(); ++i) {
    if (i >= m.params.size()) {
      extra_pos.push_back(args.pos[i]);
      continue;
    }
    scope->vars[m.params[i].name] = args.pos[i];
    given[i] = true;
  }
  if (m.catch_varargs) scope->vars["varargs"] = Value::tuple(std::move(extra_pos));
  Value extra_kw = Value::dict();
  for (auto& [k, v] : args.kw) {
    size_t i = 0;
    while (i < m.params.size() && m.params[i].name != k) ++i;
    if (i == m.params.size() && m.catch_kwargs) {
      extra_kw.set(k, v);
      continue;
    }
    if (i == m.params.size()) return make_error("macro '{}' takes no keyword argument '{}'", m.name, k);
    if (given[i]) return make_error("macro '{}' got multiple values for argument '{}'", m.name, k);
    scope->vars[k] = v;
    given[i] = true;
  }
  if (m.catch_kwargs) scope->vars["kwargs"] = extra_kw;
  for (size_t i = 0; i < m.params.size(); ++i) {
    if (given[i]) continue;
    if (m.params[i].default_value) {
      EDGELM_ASSIGN(Value d, eval(*m.params[i].default_value, scope));
      scope->vars[m.params[i].name] = d;
    } else {
      scope->vars[m.params[i].name] = Value::undefined("parameter '" + m.params[i].name + "' was not provided");
    }
  }
  std::string out;
  EDGELM_TRY(exec(m.body, scope, out));
  return Value::string(std::move(out));
}

Result<Value> Interpreter::call(const Value& fn, Args& args) {
  if (fn.is_undefined()) return make_error("{}", undefined_message(fn));
  if (!fn.is_callable()) return make_error("'{}' object is not callable", type_name(fn));
  return fn.callable().fn(*this, args);
}

Result<Value> Interpreter::lookup(const std::string& name, const ScopePtr& scope) const {
  if (const Value* v = scope->lookup(name)) return *v;
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

Result<Value> Interpreter::get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined: return make_error("{}", undefined_message(obj));
    case Value::Kind::kNamespace: {
      const Value* v = obj.namespace_data().find(name);
      if (v) return *v;
      break;
    }
    case Value::Kind::kDict: {
      // Attribute lookup finds dict methods before keys (d.items is the method).
      if (auto m = method(obj, name)) return *m;
      if (const Value* v = obj.dict_data().find(name)) return *v;
      break;
    }
    case Value::Kind::kString:
    case Value::Kind::kList:
      if (auto m = method(obj, name)) return *m;
      break;
    default: break;
  }
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(obj), name));
}

Result<Value> Interpreter::get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined: return make_error("{}", undefined_message(obj));
    case Value::Kind::kDict:
      if (const Value* v = obj.dict_data().find(key)) return *v;
      break;
    case Value::Kind::kList:
      if ((key.is_int() || key.is_bool()) && obj.indexable()) {
        if (auto i = py_index(key.as_int(), obj.items().size())) return obj.items()[*i];
        return Value::undefined("list index out of range");
      }
      break;
    case Value::Kind::kString:
      if (key.is_int() || key.is_bool()) {
        const auto off = pystr::offsets(obj.str());
        if (auto i = py_index(key.as_int(), off.size() - 1))
          return Value::string(obj.str().substr(off[*i], off[*i + 1] - off[*i]));
        return Value::undefined("string index out of range");
      }
      break;
    default: break;
  }
  // Then as an attribute, for a string key (jinja2's getitem falls back to getattr).
  if (key.is_string()) {
    if (obj.is_namespace()) return get_attr(obj, key.str());
    if (auto m = method(obj, key.str())) return *m;
  }
  std::string k;
  append_repr(k, key, 4);
  return Value::undefined(fmt::format("'{} object' has no attribute {}", type_name(obj), k));
}

Result<std::vector<Value>> Interpreter::iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return std::vector<Value>{};
    case Value::Kind::kList: return v.items();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.dict_data().items.size());
      for (const auto& [k, x] : v.dict_data().items) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      const std::string& s = v.str();
      for (size_t i = 0; i < s.size();) {
        const size_t n = pystr::cp_size(s, i);
        chars.push_back(Value::string(s.substr(i, n)));
        i += n;
      }
      return chars;
    }
    default: return make_error("'{}' object is not iterable", type_name(v));
  }
}

Result<Value> Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  DepthGuard g(depth_);
  if (depth_ > opt_.max_depth) return make_error("template nesting deeper than {}", opt_.max_depth);
  EDGELM_TRY(step());
  auto r = eval_inner(e, scope);
  if (!r.ok()) return at(e.line, r.error());
  return r;
}

Result<Args> Interpreter::eval_args(const Expr& e, const ScopePtr& scope, size_t first) {
  Args a;
  for (size_t i = first; i < e.args.size(); ++i) {
    EDGELM_ASSIGN(Value v, eval(*e.args[i], scope));
    a.pos.push_back(std::move(v));
  }
  for (const auto& [k, x] : e.kwargs) {
    EDGELM_ASSIGN(Value v, eval(*x, scope));
    a.kw.emplace_back(k, std::move(v));
  }
  return a;
}

Result<Value> Interpreter::eval_call(const Expr& e, const ScopePtr& scope) {
  EDGELM_ASSIGN(Value fn, eval(*e.args[0], scope));
  EDGELM_ASSIGN(Args a, eval_args(e, scope, 1));
  return call(fn, a);
}

Result<Value> Interpreter::eval_inner(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case Expr::Kind::kLiteral: return e.value;
    case Expr::Kind::kName: return lookup(e.name, scope);
    case Expr::Kind::kAttr: {
      EDGELM_ASSIGN(Value obj, eval(*e.args[0], scope));
      return get_attr(obj, e.name);
    }
    case Expr::Kind::kItem: {
      EDGELM_ASSIGN(Value obj, eval(*e.args[0], scope));
      EDGELM_ASSIGN(Value key, eval(*e.args[1], scope));
      return get_item(obj, key);
    }
    case Expr::Kind::kSlice: {
      EDGELM_ASSIGN(Value obj, eval(*e.args[0], scope));
      Value parts[3] = {Value::none(), Value::none(), Value::none()};
      for (int i = 0; i < 3; ++i)
        if (e.args[static_cast<size_t>(i) + 1]) {
          EDGELM_ASSIGN(parts[i], eval(*e.args[static_cast<size_t>(i) + 1], scope));
        }
      if (obj.is_string()) {
        const auto off = pystr::offsets(obj.str());
        EDGELM_ASSIGN(auto pos, slice_positions(off.size() - 1, parts[0], parts[1], parts[2]));
        std::string s;
        for (size_t p : pos) s.append(obj.str(), off[p], off[p + 1] - off[p]);
        return Value::string(std::move(s));
      }
      if (obj.indexable()) {
        EDGELM_ASSIGN(auto pos, slice_positions(obj.items().size(), parts[0], parts[1], parts[2]));
        std::vector<Value> out;
        out.reserve(pos.size());
        for (size_t p : pos) out.push_back(obj.items()[p]);
        return Value::list(std::move(out), obj.seq());
      }
      // Slices are plain Python subscripts in jinja2 (no getitem fallback).
      return make_error("'{}' object is not subscriptable", type_name(obj));
    }
    case Expr::Kind::kCall: return eval_call(e, scope);
    case Expr::Kind::kFilter: {
      EDGELM_ASSIGN(Value in, eval(*e.args[0], scope));
      if (!e.known) return make_error("no filter named '{}' found", e.name);
      EDGELM_ASSIGN(Args a, eval_args(e, scope, 1));
      return apply_filter(*this, e.name, in, a);
    }
    case Expr::Kind::kTest: {
      EDGELM_ASSIGN(Value in, eval(*e.args[0], scope));
      if (!e.known) return make_error("no test named '{}' found", e.name);
      EDGELM_ASSIGN(Args a, eval_args(e, scope, 1));
      EDGELM_ASSIGN(bool r, apply_test(*this, e.name, in, a));
      return Value::boolean(r != e.negated);
    }
    case Expr::Kind::kUnary: {
      EDGELM_ASSIGN(Value x, eval(*e.args[0], scope));
      if (e.name == "not") return Value::boolean(!x.truthy());
      if (x.is_undefined()) return make_error("{}", undefined_message(x));
      if (!x.is_number()) return make_error("bad operand type for unary {}: '{}'", e.name, type_name(x));
      if (e.name == "+") return x.is_bool() ? Value::integer(x.as_int()) : x;
      if (x.is_float()) return Value::real(-x.as_double());
      EDGELM_ASSIGN(int64_t r, checked(0, x.as_int(), '-'));
      return Value::integer(r);
    }
    case Expr::Kind::kBinary: {
      EDGELM_ASSIGN(Value a, eval(*e.args[0], scope));
      if (e.name == "and") {
        if (!a.truthy()) return a;
        return eval(*e.args[1], scope);
      }
      if (e.name == "or") {
        if (a.truthy()) return a;
        return eval(*e.args[1], scope);
      }
      EDGELM_ASSIGN(Value b, eval(*e.args[1], scope));
      return binary(e.name, a, b);
    }
    case Expr::Kind::kCompare: {
      EDGELM_ASSIGN(Value left, eval(*e.args[0], scope));
      for (size_t i = 0; i < e.ops.size(); ++i) {
        EDGELM_ASSIGN(Value right, eval(*e.args[i + 1], scope));
        EDGELM_ASSIGN(bool ok, compare(e.ops[i], left, right));
        if (!ok) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case Expr::Kind::kCond: {
      EDGELM_ASSIGN(Value c, eval(*e.args[0], scope));
      if (c.truthy()) return eval(*e.args[1], scope);
      if (e.args[2]) return eval(*e.args[2], scope);
      return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
    }
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      std::vector<Value> items;
      for (const auto& x : e.args) {
        EDGELM_ASSIGN(Value v, eval(*x, scope));
        items.push_back(std::move(v));
      }
      return Value::list(std::move(items), e.kind == Expr::Kind::kTuple ? Value::Seq::kTuple : Value::Seq::kList);
    }
    case Expr::Kind::kDict: {
      Value d = Value::dict();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        EDGELM_ASSIGN(Value k, eval(*e.args[i], scope));
        EDGELM_ASSIGN(Value v, eval(*e.args[i + 1], scope));
        if (k.is_list() && k.seq() != Value::Seq::kTuple) return make_error("unhashable type: 'list'");
        if (k.is_dict() || k.is_undefined()) return make_error("unhashable type: '{}'", type_name(k));
        d.set_item(std::move(k), std::move(v));
      }
      return d;
    }
  }
  return make_error("bad expression");
}

Result<bool> Interpreter::compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in" || op == "notin") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string())
        return make_error("'in <string>' requires string as left operand, not {}", type_name(a));
      found = b.str().find(a.str()) != std::string::npos;
    } else if (b.is_dict()) {
      if (a.is_dict() || (a.is_list() && a.seq() != Value::Seq::kTuple))
        return make_error("unhashable type: '{}'", type_name(a));
      found = b.dict_data().find(a) != nullptr;
    } else if (b.is_list() || b.is_undefined()) {
      if (b.is_list())
        for (const auto& x : b.items())
          if (equals(x, a)) {
            found = true;
            break;
          }
    } else {
      return make_error("argument of type '{}' is not iterable", type_name(b));
    }
    return op == "in" ? found : !found;
  }
  if (a.is_undefined()) return make_error("{}", undefined_message(a));
  if (b.is_undefined()) return make_error("{}", undefined_message(b));
  if (op == "<") return less_than(a, b);
  if (op == ">") return less_than(b, a);
  if (op == "<=") {
    EDGELM_ASSIGN(bool r, less_than(b, a));
    return !r;
  }
  if (op == ">=") {
    EDGELM_ASSIGN(bool r, less_than(a, b));
    return !r;
  }
  return make_error("unknown comparison '{}'", op);
}

Result<Value> Interpreter::binary(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s;
    if (!append_str(s, a) || !append_str(s, b)) return make_error("value nested too deeply to print");
    EDGELM_TRY(check_size(s.size()));
    return Value::string(std::move(s));
  }
  if (a.is_undefined()) return make_error("{}", undefined_message(a));
  if (b.is_undefined()) return make_error("{}", undefined_message(b));
  const char o = op[0];
  if (a.is_number() && b.is_number()) {
    const bool fl = a.is_float() || b.is_float();
    if (op == "/") {
      if (b.as_double() == 0) return make_error("division by zero");
      return Value::real(a.as_double() / b.as_double());
    }
    if (op == "//" || op == "%") {
      if (b.as_double() == 0) return make_error("{}", op == "%" ? "modulo by zero" : "integer division or modulo by zero");
      if (!fl) {
        if (b.as_int() == -1 && a.as_int() == INT64_MIN) return make_error("integer overflow");
        return Value::integer(op == "//" ? floordiv(a.as_int(), b.as_int()) : pymod(a.as_int(), b.as_int()));
      }
      // CPython's float divmod: (x - fmod(x, y)) / y, rounded to the nearest
      // integral value, so 1 // 0.1 is 9.0 (floor(1 / 0.1) would be 10.0).
      const double x = a.as_double(), y = b.as_double();
      double m = std::fmod(x, y);
      double div = (x - m) / y;
      if (m != 0) {
        if ((y < 0) != (m < 0)) {
          m += y;
          div -= 1.0;
        }
      } else {
        m = std::copysign(0.0, y);
      }
      if (op == "%") return Value::real(m);
      if (div == 0) return Value::real(std::copysign(0.0, x / y));
      double fd = std::floor(div);
      if (div - fd > 0.5) fd += 1.0;
      return Value::real(fd);
    }
    if (op == "**") {
      if (!fl && b.as_int() >= 0) {
        int64_t r = 1, base = a.as_int(), ex = b.as_int();
        while (ex > 0) {
          if (ex & 1) {
            EDGELM_ASSIGN(r, checked(r, base, '*'));
          }
          ex >>= 1;
          if (ex > 0) {
            EDGELM_ASSIGN(base, checked(base, base, '*'));
          }
        }
        return Value::integer(r);
      }
      if (a.as_double() == 0 && b.as_double() < 0) return make_error("zero to a negative power");
      return Value::real(std::pow(a.as_double(), b.as_double()));
    }
    if (fl) {
      const double x = a.as_double(), y = b.as_double();
      if (o == '+') return Value::real(x + y);
      if (o == '-') return Value::real(x - y);
      if (o == '*') return Value::real(x * y);
    } else {
      EDGELM_ASSIGN(int64_t r, checked(a.as_int(), b.as_int(), o));
      return Value::integer(r);
    }
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      EDGELM_TRY(check_size(a.str().size() + b.str().size()));
      // markupsafe: Markup + str escapes the str, and the result is Markup.
      if (a.is_markup() || b.is_markup()) {
        const std::string l = a.is_markup() ? a.str() : pystr::html_escape(a.str());
        const std::string r = b.is_markup() ? b.str() : pystr::html_escape(b.str());
        return Value::string(l + r, true);
      }
      return Value::string(a.str() + b.str());
    }
    if (a.indexable() && b.indexable() && a.seq() == b.seq()) {
      EDGELM_TRY(check_size(a.items().size() + b.items().size()));
      std::vector<Value> items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(items), a.seq());
    }
    if (a.is_string()) return make_error("can only concatenate str (not \"{}\") to str", type_name(b));
    if (a.is_list()) return make_error("can only concatenate {} (not \"{}\") to {}", type_name(a), type_name(b), type_name(a));
  }
  if (op == "*") {
    const Value* seq = (a.is_string() || a.is_list()) ? &a : &b;
    const Value* n = seq == &a ? &b : &a;
    if ((seq->is_string() || seq->indexable()) && (n->is_int() || n->is_bool())) {
      const int64_t times = std::max<int64_t>(0, n->as_int());
      const size_t unit = seq->is_string() ? seq->str().size() : seq->items().size();
      if (unit > 0 && static_cast<uint64_t>(times) > opt_.max_output_bytes / unit)
        return make_error("template output exceeds {} bytes", opt_.max_output_bytes);
      if (seq->is_string()) {
        std::string s;
        for (int64_t i = 0; i < times; ++i) s += seq->str();
        return Value::string(std::move(s));
      }
      std::vector<Value> items;
      for (int64_t i = 0; i < times; ++i) items.insert(items.end(), seq->items().begin(), seq->items().end());
      return Value::list(std::move(items), seq->seq());
    }
  }
  if (op == "%" && a.is_string()) return percent_format(*this, a, b);
  return make_error("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b));
}

}  // namespace edgelm::jinja
