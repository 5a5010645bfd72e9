#include "constrain/schema.h"

#include <algorithm>
#include <functional>

#include "constrain/matcher.h"

namespace edgelm::constrain {

namespace {

int sat_add(int64_t a, int64_t b) {
  return static_cast<int>(std::min<int64_t>(a + b, kUnbounded));
}

}  // namespace

void Pattern::finish() {
  const int n = end();
  closure.assign(static_cast<size_t>(n) + 1, 0);
  min_rest.assign(static_cast<size_t>(n) + 1, 0);
  max_rest.assign(static_cast<size_t>(n) + 1, 0);
  closure[static_cast<size_t>(n)] = uint64_t{1} << n;
  for (int p = n - 1; p >= 0; --p) {
    const PatternStep& s = steps[static_cast<size_t>(p)];
    const size_t i = static_cast<size_t>(p);
    closure[i] = (uint64_t{1} << p) | (s.rep != Rep::One ? closure[i + 1] : 0);
    min_rest[i] = min_rest[i + 1] + (s.rep == Rep::One ? 1 : 0);
    max_rest[i] = s.rep == Rep::Star ? kUnbounded : sat_add(max_rest[i + 1], 1);
  }
}

uint64_t Pattern::step(uint64_t set, uint8_t b) const {
  uint64_t next = 0;
  const int n = end();
  for (int p = 0; p < n; ++p) {
    if (!((set >> p) & 1)) continue;
    const PatternStep& s = steps[static_cast<size_t>(p)];
    if (!s.bytes.has(b)) continue;
    next |=
        s.rep == Rep::Star ? closure[static_cast<size_t>(p)] : closure[static_cast<size_t>(p) + 1];
  }
  return next;
}

int Schema::any_string() {
  if (any_string_ < 0) {
    Node s;
    s.kind = Kind::String;
    any_string_ = add(std::move(s));
  }
  return any_string_;
}

int Schema::any() {
  if (any_ >= 0) return any_;
  const int str = any_string();
  Node choice;
  choice.kind = Kind::Choice;
  any_ = add(std::move(choice));
  Node obj;
  obj.kind = Kind::Object;
  obj.free_keys = true;
  obj.extra = any_;
  const int o = add(std::move(obj));
  Node arr;
  arr.kind = Kind::Array;
  arr.items = any_;
  const int a = add(std::move(arr));
  Node num;
  num.kind = Kind::Number;
  const int nu = add(std::move(num));
  Node lit;
  lit.kind = Kind::Literal;
  lit.literals = {"true", "false", "null"};
  const int l = add(std::move(lit));
  nodes[static_cast<size_t>(any_)].alts = {o, a, str, nu, l};
  return any_;
}

Status Schema::finish() {
  if (root < 0 || root >= static_cast<int>(nodes.size()))
    return make_error("internal: the schema has no root");
  any_string();
  if (nodes.size() > static_cast<size_t>(kMaxNodes))
    return make_error("the schema is too large ({} nodes; at most {})", nodes.size(), kMaxNodes);
  for (Pattern& p : patterns) p.finish();

  // First bytes: leaves and containers directly, choices as the union of
  // their alternatives (whose first bytes must not overlap).
  const char* num_first = "-0123456789";
  for (Node& n : nodes) {
    n.container = n.kind == Kind::Object || n.kind == Kind::Array;
    n.first = ByteSet();
    switch (n.kind) {
      case Kind::Object:
        n.first.add('{');
        break;
      case Kind::Array:
        n.first.add('[');
        break;
      case Kind::String:
        n.first.add('"');
        break;
      case Kind::Integer:
      case Kind::Number:
        for (const char* c = num_first; *c; ++c)
          if (number_completion(n, std::string_view(c, 1)) >= 0)
            n.first.add(static_cast<uint8_t>(*c));
        break;
      case Kind::Literal:
        for (const std::string& l : n.literals)
          if (!l.empty()) n.first.add(static_cast<uint8_t>(l[0]));
        break;
      case Kind::Choice:
        break;
    }
  }
  std::vector<uint8_t> state(nodes.size(), 0);  // 0 new, 1 in progress, 2 done
  std::function<Status(int)> choice_first = [&](int i) -> Status {
    Node& n = nodes[static_cast<size_t>(i)];
    if (n.kind != Kind::Choice || state[static_cast<size_t>(i)] == 2) return Status::Ok();
    if (state[static_cast<size_t>(i)] == 1) return make_error("a choice of types refers to itself");
    state[static_cast<size_t>(i)] = 1;
    ByteSet all;
    for (int a : n.alts) {
      EDGELM_TRY(choice_first(a));
      const ByteSet& f = nodes[static_cast<size_t>(a)].first;
      if (all.intersects(f)) {
        for (int b = 0; b < 256; ++b)
          if (all.has(static_cast<uint8_t>(b)) && f.has(static_cast<uint8_t>(b)))
            return make_error(
                "alternatives whose values can start with the same character ('{}') are not "
                "supported",
                static_cast<char>(b));
      }
      all.add(f);
    }
    n.first = all;
    state[static_cast<size_t>(i)] = 2;
    return Status::Ok();
  };
  for (size_t i = 0; i < nodes.size(); ++i) EDGELM_TRY(choice_first(static_cast<int>(i)));

  // Shortest values, to a fixed point (Any refers to itself through its
  // containers; a node that never gets a finite length allows no value).
  for (Node& n : nodes) n.min_bytes = kUnbounded;
  for (size_t round = 0; round <= nodes.size() + 1; ++round) {
    bool changed = false;
    for (Node& n : nodes) {
      const auto mb = [&](int idx) { return nodes[static_cast<size_t>(idx)].min_bytes; };
      int v = kUnbounded;
      switch (n.kind) {
        case Kind::Object:
          if (n.free_keys) {
            v = 2;
          } else {
            n.req_suffix.assign(n.props.size() + 1, 0);
            for (size_t j = n.props.size(); j-- > 0;) {
              const Property& p = n.props[j];
              n.req_suffix[j] =
                  p.required ? sat_add(n.req_suffix[j + 1],
                                       sat_add(static_cast<int64_t>(p.key.size()) + 2, mb(p.node)))
                             : n.req_suffix[j + 1];
            }
            v = sat_add(2, n.req_suffix[0] > 0 ? n.req_suffix[0] - 1 : 0);
          }
          break;
        case Kind::Array:
          v = n.min_items == 0
                  ? 2
                  : sat_add(1, static_cast<int64_t>(n.min_items) * sat_add(mb(n.items), 1));
          break;
        case Kind::String: {
          int chars = n.min_len;
          if (n.pattern >= 0) {
            const Pattern& p = patterns[static_cast<size_t>(n.pattern)];
            if (p.min_rest[0] > n.max_len || p.max_rest[0] < n.min_len) break;
            chars = std::max(chars, p.min_rest[0]);
          }
          if (chars <= n.max_len) v = chars + 2;
          break;
        }
        case Kind::Integer:
        case Kind::Number: {
          const int r = number_completion(n, "");
          if (r >= 0) v = r;
          break;
        }
        case Kind::Literal:
          for (const std::string& l : n.literals)
            if (!l.empty()) v = std::min(v, static_cast<int>(l.size()));
          break;
        case Kind::Choice:
          for (int a : n.alts) v = std::min(v, mb(a));
          break;
      }
      if (v < n.min_bytes) {
        n.min_bytes = v;
        changed = true;
      }
    }
    if (!changed) break;
  }
  // The lengths saturate: a value that needs kUnbounded bytes or more (a
  // huge minItems, or required properties nested deep) cannot be told from
  // none, and fits no context either way.
  if (nodes[static_cast<size_t>(root)].min_bytes >= kUnbounded)
    return make_error(
        "the schema allows no value shorter than {} bytes (none at all, or only longer "
        "ones: a huge minItems or minLength, or required properties nested many levels deep)",
        kUnbounded);

  // Nesting: frames the deepest static path needs (Any's containers nest
  // only as far as frames remain, so it counts as a leaf).
  std::vector<int> depth(nodes.size(), -1);
  std::function<int(int, int)> deepest = [&](int i, int guard) -> int {
    if (guard > kMaxDepth || i == any_) return 1;
    if (depth[static_cast<size_t>(i)] >= 0) return depth[static_cast<size_t>(i)];
    const Node& n = nodes[static_cast<size_t>(i)];
    int d = 1;
    switch (n.kind) {
      case Kind::Object:
        for (const Property& p : n.props) d = std::max(d, 1 + deepest(p.node, guard + 1));
        if (n.free_keys) d = std::max(d, 1 + deepest(n.extra, guard + 1));
        break;
      case Kind::Array:
        d = 1 + deepest(n.items, guard + 1);
        break;
      case Kind::Choice:
        for (int a : n.alts) d = std::max(d, deepest(a, guard + 1));
        break;
      default:
        break;
    }
    depth[static_cast<size_t>(i)] = d;
    return d;
  };
  if (const int d = deepest(root, 0); d > kMaxDepth - 1)
    return make_error("the schema nests {} levels deep; at most {} are supported", d,
                      kMaxDepth - 1);
  return Status::Ok();
}

}  // namespace edgelm::constrain
