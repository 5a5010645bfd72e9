#include "template/parser.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>

namespace edgelm::jinja {

namespace {

using T = Token::Type;

bool one_of(const std::string& s, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (s == n) return true;
  return false;
}

bool expr_reads(const Expr* e, const std::string& name) {
  if (!e) return false;
  if (e->kind == Expr::Kind::kName && e->name == name) return true;
  for (const auto& a : e->args)
    if (expr_reads(a.get(), name)) return true;
  for (const auto& kw : e->kwargs)
    if (expr_reads(kw.second.get(), name)) return true;
  return false;
}

bool body_reads(const Body& body, const std::string& name) {
  for (const auto& n : body) {
    if (expr_reads(n->expr.get(), name) || expr_reads(n->filter.get(), name)) return true;
    for (const auto& c : n->conds)
      if (expr_reads(c.get(), name)) return true;
    for (const auto& b : n->bodies)
      if (body_reads(b, name)) return true;
    for (const auto& p : n->params)
      if (expr_reads(p.default_value.get(), name)) return true;
    if (body_reads(n->body, name) || body_reads(n->else_body, name)) return true;
  }
  return false;
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : t_(t) {}

  Result<Body> run() {
    std::string end;
    EDGELM_ASSIGN(Body body, parse_body({}, &end));
    for (const auto& u : unknown_)
      if (!u.soft)
        return make_error("line {}: no {} named '{}'", u.expr->line, u.expr->kind == Expr::Kind::kFilter ? "filter" : "test",
                          u.expr->name);
    return body;
  }

 private:
  struct Unknown {
    Expr* expr;
    bool soft;  // inside an if or a conditional expression: jinja2 fails only when it runs
  };

  const Token& cur() const { return t_[std::min(p_, t_.size() - 1)]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  void next() {
    if (p_ < t_.size() - 1) ++p_;
  }
  bool is_op(const char* op) const { return cur().type == T::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == T::kName && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case T::kEof: return "end of template";
      case T::kBlockEnd: return "end of statement block";
      case T::kVarEnd: return "end of print statement";
      case T::kString: return "string";
      default: return "'" + printable(t.text, 40) + "'";
    }
  }
  Error fail_here(std::string_view what) const {
    return make_error("line {}: {}, got {}", cur().line, what, describe(cur()));
  }
  Status expect_op(const char* op) {
    if (!skip_op(op)) return fail_here(std::string("expected '") + op + "'");
    return {};
  }
  Status expect_block_end() {
    if (cur().type != T::kBlockEnd) return fail_here("expected end of statement block");
    next();
    return {};
  }
  Result<std::string> expect_name() {
    if (cur().type != T::kName) return fail_here("expected a name");
    std::string n = cur().text;
    next();
    return n;
  }

  struct DepthGuard {
    int& d;
    explicit DepthGuard(int& x) : d(++x) {}
    ~DepthGuard() { --d; }
  };
  // A loop that builds a left-deep chain (a + b + c, x.y.z, x|f|g) deepens
  // the tree without recursing: each link counts as one level of nesting, so
  // no tree is deeper than kMaxParseDepth (its destructor recurses).
  struct ChainGuard {
    int& d;
    int n = 0;
    explicit ChainGuard(int& x) : d(x) {}
    ~ChainGuard() { d -= n; }
    Status link(int line) {
      ++d;
      ++n;
      if (d > kMaxParseDepth) return make_error("line {}: expression nested too deeply", line);
      return {};
    }
  };

  // ---- statements --------------------------------------------------------

  // Parses nodes until a block tag named in `ends` (left for the caller,
  // its name in *end) or the end of the template (only when ends is empty).
  Result<Body> parse_body(std::initializer_list<const char*> ends, std::string* end) {
    DepthGuard g(depth_);
    if (depth_ > kMaxParseDepth) return make_error("line {}: blocks nested too deeply", cur().line);
    Body body;
    while (true) {
      const Token& tok = cur();
      if (tok.type == T::kEof) {
        if (ends.size() == 0) return body;
        std::string want;
        for (const char* e : ends) want += std::string(want.empty() ? "" : " or ") + "'" + e + "'";
        return make_error("line {}: unexpected end of template, expected {}", tok.line, want);
      }
      if (tok.type == T::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kText;
        n->line = tok.line;
        n->text = tok.text;
        body.push_back(std::move(n));
        next();
        continue;
      }
      if (tok.type == T::kVarBegin) {
        next();
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        n->line = tok.line;
        EDGELM_ASSIGN(n->expr, parse_tuple(true, {}, false));
        if (cur().type != T::kVarEnd) return fail_here("expected end of print statement");
        next();
        body.push_back(std::move(n));
        continue;
      }
      if (tok.type != T::kBlockBegin) return fail_here("unexpected token");
      const Token& name = peek();
      if (name.type != T::kName) {
        next();
        return fail_here("expected a statement name");
      }
      for (const char* e : ends)
        if (name.text == e) {
          next();
          next();
          *end = name.text;
          return body;
        }
      next();
      EDGELM_ASSIGN(NodePtr n, parse_statement());
      if (n) body.push_back(std::move(n));
    }
  }

  Result<NodePtr> parse_statement() {
    const Token tok = cur();
    const std::string& kw = tok.text;
    next();
    auto n = std::make_unique<Node>();
    n->line = tok.line;
    if (kw == "if") return parse_if(std::move(n));
    if (kw == "for") return parse_for(std::move(n));
    if (kw == "set") return parse_set(std::move(n));
    if (kw == "macro") return parse_macro(std::move(n));
    if (kw == "filter") return parse_filter_block(std::move(n));
    if (kw == "break" || kw == "continue") {
      if (loops_ == 0) return make_error("line {}: '{}' outside a loop", tok.line, kw);
      n->kind = kw == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      EDGELM_TRY(expect_block_end());
      return n;
    }
    if (kw == "generation") {
      // Hugging Face's AssistantTracker tag: renders its body.
      n->kind = Node::Kind::kScope;
      EDGELM_TRY(expect_block_end());
      std::string end;
      EDGELM_ASSIGN(n->body, parse_body({"endgeneration"}, &end));
      EDGELM_TRY(expect_block_end());
      return n;
    }
    if (one_of(kw, {"call", "include", "import", "from", "extends", "block", "with", "autoescape", "do", "trans",
                    "pluralize"}))
      return make_error("line {}: the '{}' tag is not supported by edgelm's chat-template interpreter", tok.line, kw);
    return make_error("line {}: encountered unknown tag '{}'", tok.line, printable(kw, 40));
  }

  Result<NodePtr> parse_if(NodePtr n) {
    n->kind = Node::Kind::kIf;
    const bool was_soft = soft_;
    soft_ = true;
    while (true) {
      EDGELM_ASSIGN(ExprPtr cond, parse_tuple(false, {}, false));
      EDGELM_TRY(expect_block_end());
      std::string end;
      EDGELM_ASSIGN(Body b, parse_body({"elif", "else", "endif"}, &end));
      n->conds.push_back(std::move(cond));
      n->bodies.push_back(std::move(b));
      if (end == "elif") continue;
      if (end == "else") {
        EDGELM_TRY(expect_block_end());
        EDGELM_ASSIGN(n->else_body, parse_body({"endif"}, &end));
      }
      EDGELM_TRY(expect_block_end());
      break;
    }
    soft_ = was_soft;
    return n;
  }

  // A name, or names separated by commas (optionally in parentheses).
  Result<Target> parse_target(bool allow_ns) {
    Target t;
    const bool paren = skip_op("(");
    EDGELM_ASSIGN(std::string first, expect_name());
    if (allow_ns && !paren && is_op(".")) {
      next();
      EDGELM_ASSIGN(t.attr, expect_name());
      t.names.push_back(first);
      return t;
    }
    t.names.push_back(first);
    while (skip_op(",")) {
      t.tuple = true;
      if (cur().type != T::kName) break;  // trailing comma
      EDGELM_ASSIGN(std::string nm, expect_name());
      t.names.push_back(nm);
    }
    if (paren) EDGELM_TRY(expect_op(")"));
    for (const auto& nm : t.names)
      if (one_of(nm, {"true", "false", "none", "True", "False", "None"}))
        return make_error("line {}: cannot assign to '{}'", cur().line, nm);
    return t;
  }

  Result<NodePtr> parse_for(NodePtr n) {
    n->kind = Node::Kind::kFor;
    EDGELM_ASSIGN(n->target, parse_target(false));
    if (!skip_name("in")) return fail_here("expected 'in'");
    EDGELM_ASSIGN(n->expr, parse_tuple(false, {"recursive"}, false));
    const bool was_soft = soft_;
    if (skip_name("if")) {
      // The loop filter is compiled in the loop's own frame (not soft).
      soft_ = false;
      EDGELM_ASSIGN(n->filter, parse_expression(true));
    }
    if (is_name("recursive")) return make_error("line {}: recursive loops are not supported", cur().line);
    EDGELM_TRY(expect_block_end());
    soft_ = false;
    ++loops_;
    std::string end;
    EDGELM_ASSIGN(n->body, parse_body({"endfor", "else"}, &end));
    --loops_;
    if (end == "else") {
      EDGELM_TRY(expect_block_end());
      EDGELM_ASSIGN(n->else_body, parse_body({"endfor"}, &end));
    }
    soft_ = was_soft;
    EDGELM_TRY(expect_block_end());
    return n;
  }

  Result<NodePtr> parse_set(NodePtr n) {
    EDGELM_ASSIGN(n->target, parse_target(true));
    if (skip_op("=")) {
      n->kind = Node::Kind::kSet;
      EDGELM_ASSIGN(n->expr, parse_tuple(true, {}, false));
      EDGELM_TRY(expect_block_end());
      return n;
    }
    n->kind = Node::Kind::kSetBlock;
    if (n->target.tuple) return make_error("line {}: a block set needs a single name", n->line);
    const bool was_soft = soft_;
    soft_ = false;
    if (skip_op("|")) {
      EDGELM_ASSIGN(n->filter, parse_filter_chain(block_placeholder(n->line)));
    }
    EDGELM_TRY(expect_block_end());
    std::string end;
    const int loops = loops_;
    loops_ = 0;
    EDGELM_ASSIGN(n->body, parse_body({"endset"}, &end));
    loops_ = loops;
    soft_ = was_soft;
    EDGELM_TRY(expect_block_end());
    return n;
  }

  Result<NodePtr> parse_macro(NodePtr n) {
    n->kind = Node::Kind::kMacro;
    EDGELM_ASSIGN(n->name, expect_name());
    EDGELM_TRY(expect_op("("));
    const bool was_soft = soft_;
    soft_ = false;
    while (!is_op(")")) {
      if (!n->params.empty()) EDGELM_TRY(expect_op(","));
      if (is_op(")")) break;
      MacroParam p;
      EDGELM_ASSIGN(p.name, expect_name());
      if (skip_op("=")) {
        EDGELM_ASSIGN(p.default_value, parse_expression(true));
      }
      else if (!n->params.empty() && n->params.back().default_value)
        return make_error("line {}: non-default argument follows default argument", n->line);
      n->params.push_back(std::move(p));
    }
    next();
    EDGELM_TRY(expect_block_end());
    std::string end;
    const int loops = loops_;
    loops_ = 0;
    EDGELM_ASSIGN(n->body, parse_body({"endmacro"}, &end));
    n->catch_varargs = body_reads(n->body, "varargs");
    n->catch_kwargs = body_reads(n->body, "kwargs");
    loops_ = loops;
    soft_ = was_soft;
    EDGELM_TRY(expect_block_end());
    return n;
  }

  Result<NodePtr> parse_filter_block(NodePtr n) {
    n->kind = Node::Kind::kFilterBlock;
    const bool was_soft = soft_;
    soft_ = false;
    EDGELM_ASSIGN(n->filter, parse_filter_chain(block_placeholder(n->line)));
    EDGELM_TRY(expect_block_end());
    std::string end;
    EDGELM_ASSIGN(n->body, parse_body({"endfilter"}, &end));
    soft_ = was_soft;
    EDGELM_TRY(expect_block_end());
    return n;
  }

  static ExprPtr block_placeholder(int line) {
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::kName;
    e->line = line;
    e->name = kBlockVar;
    return e;
  }

  // ---- expressions -------------------------------------------------------

  bool tuple_end(std::initializer_list<const char*> extra) const {
    if (cur().type == T::kVarEnd || cur().type == T::kBlockEnd || cur().type == T::kEof || is_op(")")) return true;
    for (const char* e : extra)
      if (is_name(e)) return true;
    return false;
  }

  Result<ExprPtr> parse_tuple(bool with_condexpr, std::initializer_list<const char*> extra, bool explicit_parens) {
    const int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) EDGELM_TRY(expect_op(","));
      if (tuple_end(extra)) break;
      EDGELM_ASSIGN(ExprPtr e, parse_expression(with_condexpr));
      items.push_back(std::move(e));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) return fail_here("expected an expression");
    }
    auto t = std::make_unique<Expr>();
    t->kind = Expr::Kind::kTuple;
    t->line = line;
    t->args = std::move(items);
    return t;
  }

  Result<ExprPtr> parse_expression(bool with_condexpr) {
    DepthGuard g(depth_);
    if (depth_ > kMaxParseDepth) return make_error("line {}: expression nested too deeply", cur().line);
    if (!with_condexpr) return parse_or();
    const size_t mark = unknown_.size();
    EDGELM_ASSIGN(ExprPtr e, parse_or());
    ChainGuard chain(depth_);
    while (skip_name("if")) {
      EDGELM_TRY(chain.link(cur().line));
      auto c = std::make_unique<Expr>();
      c->kind = Expr::Kind::kCond;
      c->line = e->line;
      EDGELM_ASSIGN(ExprPtr test, parse_or());
      ExprPtr other;
      if (skip_name("else")) {
        EDGELM_ASSIGN(other, parse_expression(true));
      }
      c->args.push_back(std::move(test));
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(other));
      e = std::move(c);
      for (size_t i = mark; i < unknown_.size(); ++i) unknown_[i].soft = true;
    }
    return e;
  }

  ExprPtr binary(std::string op, ExprPtr l, ExprPtr r) {
    auto b = std::make_unique<Expr>();
    b->kind = Expr::Kind::kBinary;
    b->line = l->line;
    b->name = std::move(op);
    b->args.push_back(std::move(l));
    b->args.push_back(std::move(r));
    return b;
  }

  Result<ExprPtr> parse_or() {
    EDGELM_ASSIGN(ExprPtr l, parse_and());
    ChainGuard chain(depth_);
    while (skip_name("or")) {
      EDGELM_TRY(chain.link(cur().line));
      EDGELM_ASSIGN(ExprPtr r, parse_and());
      l = binary("or", std::move(l), std::move(r));
    }
    return l;
  }

  Result<ExprPtr> parse_and() {
    EDGELM_ASSIGN(ExprPtr l, parse_not());
    ChainGuard chain(depth_);
    while (skip_name("and")) {
      EDGELM_TRY(chain.link(cur().line));
      EDGELM_ASSIGN(ExprPtr r, parse_not());
      l = binary("and", std::move(l), std::move(r));
    }
    return l;
  }

  Result<ExprPtr> parse_not() {
    if (is_name("not")) {
      const int line = cur().line;
      next();
      DepthGuard g(depth_);
      if (depth_ > kMaxParseDepth) return make_error("line {}: expression nested too deeply", line);
      EDGELM_ASSIGN(ExprPtr x, parse_not());
      auto u = std::make_unique<Expr>();
      u->kind = Expr::Kind::kUnary;
      u->line = line;
      u->name = "not";
      u->args.push_back(std::move(x));
      return u;
    }
    return parse_compare();
  }

  Result<ExprPtr> parse_compare() {
    EDGELM_ASSIGN(ExprPtr first, parse_math1());
    std::unique_ptr<Expr> cmp;
    while (true) {
      std::string op;
      if (cur().type == T::kOp && one_of(cur().text, {"==", "!=", "<", "<=", ">", ">="})) {
        op = cur().text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == T::kName && peek().text == "in") {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      EDGELM_ASSIGN(ExprPtr r, parse_math1());
      if (!cmp) {
        cmp = std::make_unique<Expr>();
        cmp->kind = Expr::Kind::kCompare;
        cmp->line = first->line;
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(std::move(r));
    }
    if (cmp) return ExprPtr(std::move(cmp));
    return first;
  }

  Result<ExprPtr> parse_math1() {
    EDGELM_ASSIGN(ExprPtr l, parse_concat());
    ChainGuard chain(depth_);
    while (is_op("+") || is_op("-")) {
      EDGELM_TRY(chain.link(cur().line));
      std::string op = cur().text;
      next();
      EDGELM_ASSIGN(ExprPtr r, parse_concat());
      l = binary(op, std::move(l), std::move(r));
    }
    return l;
  }

  Result<ExprPtr> parse_concat() {
    EDGELM_ASSIGN(ExprPtr l, parse_math2());
    ChainGuard chain(depth_);
    while (skip_op("~")) {
      EDGELM_TRY(chain.link(cur().line));
      EDGELM_ASSIGN(ExprPtr r, parse_math2());
      l = binary("~", std::move(l), std::move(r));
    }
    return l;
  }

  Result<ExprPtr> parse_math2() {
    EDGELM_ASSIGN(ExprPtr l, parse_pow());
    ChainGuard chain(depth_);
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      EDGELM_TRY(chain.link(cur().line));
      std::string op = cur().text;
      next();
      EDGELM_ASSIGN(ExprPtr r, parse_pow());
      l = binary(op, std::move(l), std::move(r));
    }
    return l;
  }

  Result<ExprPtr> parse_pow() {
    EDGELM_ASSIGN(ExprPtr l, parse_unary(true));
    ChainGuard chain(depth_);
    while (skip_op("**")) {
      EDGELM_TRY(chain.link(cur().line));
      EDGELM_ASSIGN(ExprPtr r, parse_unary(true));
      l = binary("**", std::move(l), std::move(r));
    }
    return l;
  }

  Result<ExprPtr> parse_unary(bool with_filter) {
    DepthGuard g(depth_);
    if (depth_ > kMaxParseDepth) return make_error("line {}: expression nested too deeply", cur().line);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      auto u = std::make_unique<Expr>();
      u->kind = Expr::Kind::kUnary;
      u->line = cur().line;
      u->name = cur().text;
      next();
      EDGELM_ASSIGN(ExprPtr x, parse_unary(false));
      u->args.push_back(std::move(x));
      node = std::move(u);
    } else {
      EDGELM_ASSIGN(node, parse_primary());
    }
    EDGELM_ASSIGN(node, parse_postfix(std::move(node)));
    if (with_filter) {
      EDGELM_ASSIGN(node, parse_filter_expr(std::move(node)));
    }
    return node;
  }

  Result<ExprPtr> parse_primary() {
    const Token tok = cur();
    auto e = std::make_unique<Expr>();
    e->line = tok.line;
    if (tok.type == T::kName) {
      next();
      if (tok.text == "true" || tok.text == "True") return literal(std::move(e), Value::boolean(true));
      if (tok.text == "false" || tok.text == "False") return literal(std::move(e), Value::boolean(false));
      if (tok.text == "none" || tok.text == "None") return literal(std::move(e), Value::none());
      e->kind = Expr::Kind::kName;
      e->name = tok.text;
      return e;
    }
    if (tok.type == T::kString) {
      // Adjacent literals concatenate.
      std::string s;
      while (cur().type == T::kString) {
        s += cur().text;
        next();
      }
      return literal(std::move(e), Value::string(std::move(s)));
    }
    if (tok.type == T::kInt) {
      next();
      errno = 0;
      char* end = nullptr;
      const long long v = std::strtoll(tok.text.c_str(), &end, 10);
      if (errno == ERANGE) return literal(std::move(e), Value::real(std::strtod(tok.text.c_str(), nullptr)));
      return literal(std::move(e), Value::integer(v));
    }
    if (tok.type == T::kFloat) {
      next();
      return literal(std::move(e), Value::real(std::strtod(tok.text.c_str(), nullptr)));
    }
    if (skip_op("(")) {
      EDGELM_ASSIGN(ExprPtr inner, parse_tuple(true, {}, true));
      EDGELM_TRY(expect_op(")"));
      return inner;
    }
    if (skip_op("[")) {
      e->kind = Expr::Kind::kList;
      while (!is_op("]")) {
        if (!e->args.empty()) EDGELM_TRY(expect_op(","));
        if (is_op("]")) break;
        EDGELM_ASSIGN(ExprPtr x, parse_expression(true));
        e->args.push_back(std::move(x));
      }
      next();
      return e;
    }
    if (skip_op("{")) {
      e->kind = Expr::Kind::kDict;
      while (!is_op("}")) {
        if (!e->args.empty()) EDGELM_TRY(expect_op(","));
        if (is_op("}")) break;
        EDGELM_ASSIGN(ExprPtr k, parse_expression(true));
        EDGELM_TRY(expect_op(":"));
        EDGELM_ASSIGN(ExprPtr v, parse_expression(true));
        e->args.push_back(std::move(k));
        e->args.push_back(std::move(v));
      }
      next();
      return e;
    }
    return fail_here("unexpected token in an expression");
  }

  static ExprPtr literal(ExprPtr e, Value v) {
    e->kind = Expr::Kind::kLiteral;
    e->value = std::move(v);
    return e;
  }

  Result<ExprPtr> parse_postfix(ExprPtr node) {
    ChainGuard chain(depth_);
    while (true) {
      EDGELM_TRY(chain.link(cur().line));
      if (is_op(".")) {
        next();
        const Token tok = cur();
        auto a = std::make_unique<Expr>();
        a->line = tok.line;
        if (tok.type == T::kName) {
          a->kind = Expr::Kind::kAttr;
          a->name = tok.text;
        } else if (tok.type == T::kInt) {
          a->kind = Expr::Kind::kItem;
          auto idx = std::make_unique<Expr>();
          idx->line = tok.line;
          a->args.push_back(nullptr);
          a->args.push_back(literal(std::move(idx), Value::integer(std::atoll(tok.text.c_str()))));
        } else {
          return fail_here("expected a name after '.'");
        }
        next();
        if (a->args.empty()) a->args.push_back(std::move(node));
        else a->args[0] = std::move(node);
        node = std::move(a);
      } else if (is_op("[")) {
        next();
        EDGELM_ASSIGN(node, parse_subscript(std::move(node)));
      } else if (is_op("(")) {
        EDGELM_ASSIGN(node, parse_call(std::move(node)));
      } else {
        return node;
      }
    }
  }

  Result<ExprPtr> parse_subscript(ExprPtr obj) {
    const int line = cur().line;
    // One subscript, or a slice a:b:c (any part absent).
    ExprPtr parts[3];
    bool slice = false;
    if (!is_op(":")) {
      EDGELM_ASSIGN(parts[0], parse_expression(true));
    }
    if (skip_op(":")) {
      slice = true;
      if (!is_op("]") && !is_op(":")) {
        EDGELM_ASSIGN(parts[1], parse_expression(true));
      }
      if (skip_op(":"))
        if (!is_op("]")) {
          EDGELM_ASSIGN(parts[2], parse_expression(true));
        }
    } else if (is_op(",")) {
      return make_error("line {}: tuple subscripts are not supported", line);
    }
    EDGELM_TRY(expect_op("]"));
    auto e = std::make_unique<Expr>();
    e->line = line;
    e->kind = slice ? Expr::Kind::kSlice : Expr::Kind::kItem;
    e->args.push_back(std::move(obj));
    e->args.push_back(std::move(parts[0]));
    if (slice) {
      e->args.push_back(std::move(parts[1]));
      e->args.push_back(std::move(parts[2]));
    }
    return e;
  }

  // (args...) after a callee: fills args[1..] and kwargs of `e`.
  Status parse_args(Expr& e) {
    EDGELM_TRY(expect_op("("));
    bool first = true;
    while (!is_op(")")) {
      if (!first) EDGELM_TRY(expect_op(","));
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) return make_error("line {}: *args and **kwargs in calls are not supported", cur().line);
      if (cur().type == T::kName && peek().type == T::kOp && peek().text == "=") {
        std::string key = cur().text;
        next();
        next();
        EDGELM_ASSIGN(ExprPtr v, parse_expression(true));
        e.kwargs.emplace_back(std::move(key), std::move(v));
        continue;
      }
      if (!e.kwargs.empty()) return make_error("line {}: positional argument after a keyword argument", cur().line);
      EDGELM_ASSIGN(ExprPtr v, parse_expression(true));
      e.args.push_back(std::move(v));
    }
    next();
    return {};
  }

  Result<ExprPtr> parse_call(ExprPtr callee) {
    auto c = std::make_unique<Expr>();
    c->kind = Expr::Kind::kCall;
    c->line = callee->line;
    c->args.push_back(std::move(callee));
    EDGELM_TRY(parse_args(*c));
    return ExprPtr(std::move(c));
  }

  Result<std::string> dotted_name() {
    EDGELM_ASSIGN(std::string n, expect_name());
    while (is_op(".")) {
      next();
      EDGELM_ASSIGN(std::string part, expect_name());
      n += "." + part;
    }
    return n;
  }

  Result<ExprPtr> parse_filter_expr(ExprPtr node) {
    ChainGuard chain(depth_);
    while (true) {
      EDGELM_TRY(chain.link(cur().line));
      if (is_op("|")) {
        next();
        EDGELM_ASSIGN(node, parse_one_filter(std::move(node)));
      } else if (is_name("is")) {
        next();
        EDGELM_ASSIGN(node, parse_test(std::move(node)));
      } else if (is_op("(")) {
        EDGELM_ASSIGN(node, parse_call(std::move(node)));
      } else {
        return node;
      }
    }
  }

  Result<ExprPtr> parse_one_filter(ExprPtr input) {
    auto f = std::make_unique<Expr>();
    f->kind = Expr::Kind::kFilter;
    f->line = cur().line;
    EDGELM_ASSIGN(f->name, dotted_name());
    f->args.push_back(std::move(input));
    if (is_op("(")) EDGELM_TRY(parse_args(*f));
    EDGELM_TRY(check_name(*f, filter_support(f->name)));
    return ExprPtr(std::move(f));
  }

  // name(args) | name2 ... applied to `input` (filter blocks, set blocks).
  Result<ExprPtr> parse_filter_chain(ExprPtr input) {
    EDGELM_ASSIGN(ExprPtr node, parse_one_filter(std::move(input)));
    ChainGuard chain(depth_);
    while (skip_op("|")) {
      EDGELM_TRY(chain.link(cur().line));
      EDGELM_ASSIGN(node, parse_one_filter(std::move(node)));
    }
    return node;
  }

  Result<ExprPtr> parse_test(ExprPtr input) {
    auto t = std::make_unique<Expr>();
    t->kind = Expr::Kind::kTest;
    t->line = cur().line;
    t->negated = skip_name("not");
    EDGELM_ASSIGN(t->name, dotted_name());
    t->args.push_back(std::move(input));
    if (is_op("(")) {
      EDGELM_TRY(parse_args(*t));
    } else if ((cur().type == T::kName || cur().type == T::kString || cur().type == T::kInt ||
                cur().type == T::kFloat || is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) return make_error("line {}: you cannot chain multiple tests with is", cur().line);
      EDGELM_ASSIGN(ExprPtr arg, parse_primary());
      EDGELM_ASSIGN(arg, parse_postfix(std::move(arg)));
      t->args.push_back(std::move(arg));
    }
    EDGELM_TRY(check_name(*t, test_support(t->name)));
    return ExprPtr(std::move(t));
  }

  Status check_name(Expr& e, Support s) {
    const char* what = e.kind == Expr::Kind::kFilter ? "filter" : "test";
    if (s == Support::kUnsupported)
      return make_error("line {}: the '{}' {} is not supported by edgelm's chat-template interpreter", e.line, e.name,
                        what);
    if (s == Support::kUnknown) {
      e.known = false;
      unknown_.push_back({&e, soft_});
    }
    return {};
  }

  const std::vector<Token>& t_;
  size_t p_ = 0;
  int depth_ = 0;
  int loops_ = 0;
  bool soft_ = false;
  std::vector<Unknown> unknown_;
};

}  // namespace

Support filter_support(const std::string& name) {
  static const char* supported[] = {
      "abs",   "attr",    "capitalize", "count",   "d",       "default", "dictsort", "e",       "escape",
      "first", "float",   "forceescape", "format", "indent",  "int",     "items",    "join",    "last",
      "length", "list",   "lower",      "map",     "max",     "min",     "reject",   "rejectattr", "replace",
      "reverse", "round", "safe",       "select",  "selectattr", "sort", "string",   "sum",     "title",
      "tojson", "trim",   "unique",     "upper", "batch",  "slice",   "center",  "wordcount", "truncate"};
  static const char* known[] = {"filesizeformat", "groupby", "pprint", "random", "striptags",
                                "urlencode",      "urlize",  "wordwrap", "xmlattr"};
  for (const char* s : supported)
    if (name == s) return Support::kSupported;
  for (const char* s : known)
    if (name == s) return Support::kUnsupported;
  return Support::kUnknown;
}

Support test_support(const std::string& name) {
  static const char* supported[] = {
      "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "filter",
      "float", "ge", "gt", "greaterthan", "in", "integer", "iterable", "le", "lower", "lessthan", "lt", "mapping",
      "ne", "none", "number", "odd", "sameas", "sequence", "string", "test", "true", "undefined", "upper",
      "==", "!=", "<", "<=", ">", ">="};
  for (const char* s : supported)
    if (name == s) return Support::kSupported;
  return Support::kUnknown;
}

Result<Body> parse(const std::vector<Token>& tokens) {
  if (tokens.empty()) return Body{};
  return Parser(tokens).run();
}

}  // namespace edgelm::jinja
