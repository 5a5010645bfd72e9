#include "constrain/matcher.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

namespace edgelm::constrain {

namespace {

// Caps that keep every number exact in a long double and short in bytes.
constexpr int kIntDigits = 15;
constexpr int kFracDigits = 15;

// Phases of an object frame.
enum : uint8_t {
  kOOpen,
  kOKey,
  kOColon,
  kOAfterColon,
  kOValue,
  kOAfterValue,
  kOComma,
  kOKeyString
};
// Of an array frame.
enum : uint8_t { kAOpen, kAValue, kAAfter, kAComma };
// Of a string frame.
enum : uint8_t { kSBody, kSEscape, kSUtf8 };

long double pow10l_(int k) {
  long double p = 1;
  for (int i = 0; i < k; ++i) p *= 10;
  return p;
}

// Is there a point A + i*h (i >= 0) in [A, B] whose signed value a parser
// reads as a double within the node's bounds? A decimal is read as the
// nearest double, so a point within (just under) half an ulp of a bound
// reads as the bound itself: the bounds are widened (inclusive) or narrowed
// (exclusive) by 0.499 ulp, which long doubles resolve.
bool grid_hits(const Node& n, bool neg, long double A, long double B, long double h) {
  long double lo = -INFINITY, hi = INFINITY;
  if (n.has_lo) {
    const long double below = static_cast<long double>(n.lo) - std::nextafter(n.lo, -INFINITY);
    const long double above = std::nextafter(n.lo, INFINITY) - static_cast<long double>(n.lo);
    lo = n.lo_excl ? n.lo + 0.501L * above : n.lo - 0.499L * below;
  }
  if (n.has_hi) {
    const long double below = static_cast<long double>(n.hi) - std::nextafter(n.hi, -INFINITY);
    const long double above = std::nextafter(n.hi, INFINITY) - static_cast<long double>(n.hi);
    hi = n.hi_excl ? n.hi - 0.501L * below : n.hi + 0.499L * above;
  }
  if (neg) {  // -x in [lo, hi]  <=>  x in [-hi, -lo]
    const long double t = lo;
    lo = -hi, hi = -t;
  }
  const long double start = std::max(A, lo);
  if (std::isinf(start)) return false;
  long double idx = std::ceil((start - A) / h);
  if (idx < 0) idx = 0;
  long double x = A + idx * h;
  while (x < lo) x += h;  // rounding in the division
  return x <= B && x <= hi;
}

}  // namespace

int number_completion(const Node& n, std::string_view t) {
  const bool integer = n.kind == Kind::Integer;
  if (t.empty()) {
    int best = -1;
    // The shortest non-negative completion, then the negative ones.
    for (char d = '0'; d <= '9'; ++d) {
      const int r = number_completion(n, std::string_view(&d, 1));
      if (r >= 0 && (best < 0 || r + 1 < best)) best = r + 1;
    }
    const int neg = number_completion(n, "-");
    if (neg >= 0 && (best < 0 || neg + 1 < best)) best = neg + 1;
    return best;
  }
  const bool neg = t[0] == '-';
  const std::string_view body = neg ? t.substr(1) : t;
  const size_t dot = body.find('.');
  const std::string_view ip = body.substr(0, dot);
  const bool has_dot = dot != std::string_view::npos;
  const std::string_view fp = has_dot ? body.substr(dot + 1) : std::string_view();
  const int nint = static_cast<int>(ip.size());
  const int f = static_cast<int>(fp.size());
  long double I = 0;
  for (char c : ip) I = I * 10 + (c - '0');
  long double F = 0;
  for (char c : fp) F = F * 10 + (c - '0');

  // The text itself, when it is a whole number: exactly as a parser reads it.
  int best = -1;
  if (nint > 0 && (!has_dot || f > 0)) {
    bool ok = true;
    if (n.has_lo || n.has_hi) {
      char buf[48];  // a number is at most 1 + 15 + 1 + 15 bytes
      const size_t len = std::min(t.size(), sizeof(buf) - 1);
      std::memcpy(buf, t.data(), len);
      buf[len] = 0;
      // At most 15 digits before the point: integers read exactly.
      const double v = std::strtod(buf, nullptr);
      if (n.has_lo) ok = ok && (n.lo_excl ? v > n.lo : v >= n.lo);
      if (n.has_hi) ok = ok && (n.hi_excl ? v < n.hi : v <= n.hi);
    }
    if (ok) return 0;
  }
  if (!n.has_lo && !n.has_hi) return 1;  // a digit ends any prefix but a finished one

  auto consider = [&](int cost) {
    if (best < 0 || cost < best) best = cost;
  };
  if (has_dot) {
    // More fraction digits: a grid of step 10^-(f+g) within this prefix's span.
    for (int g = 1; f + g <= kFracDigits; ++g) {
      if (best >= 0 && g >= best) break;
      const long double h = 1 / pow10l_(f + g);
      const long double base = I + F / pow10l_(f);
      if (grid_hits(n, neg, base, base + 1 / pow10l_(f) - h, h)) consider(g);
    }
    return best;
  }
  // k more integer digits, then perhaps '.' and g fraction digits.
  const bool zero = nint == 1 && ip[0] == '0';
  const int kmax = zero ? 0 : kIntDigits - nint;
  for (int k = nint == 0 ? 1 : 0; k <= kmax; ++k) {
    if (best >= 0 && k >= best) break;
    long double A, B;
    if (nint == 0) {
      A = k == 1 ? 0 : pow10l_(k - 1);
      B = pow10l_(k) - 1;
    } else {
      A = I * pow10l_(k);
      B = A + pow10l_(k) - 1;
    }
    if (k > 0 && grid_hits(n, neg, A, B, 1)) consider(k);
    if (integer) continue;
    for (int g = 1; g <= kFracDigits; ++g) {
      if (best >= 0 && k + 1 + g >= best) break;
      const long double h = 1 / pow10l_(g);
      if (grid_hits(n, neg, A, B + 1 - h, h)) consider(k + 1 + g);
    }
  }
  return best;
}

bool Matcher::push(int node, uint8_t phase) {
  if (depth_ >= Schema::kMaxDepth) return false;
  Frame& f = f_[depth_++];
  f.node = static_cast<uint16_t>(node);
  f.phase = phase;
  f.space = 0;
  f.n = 0;
  f.m = 0;
  f.x = 0;
  return true;
}

void Matcher::pop() {
  --depth_;
  if (depth_ == 0) {
    finished_ = true;
    return;
  }
  Frame& p = f_[depth_ - 1];
  const Node& pn = node(p);
  if (pn.kind == Kind::Object) {
    p.phase = p.phase == kOKeyString ? kOColon : kOAfterValue;
    p.space = 0;
  } else {  // Array
    ++p.n;
    p.phase = kAAfter;
  }
}

bool Matcher::start_value(int idx, uint8_t b) {
  const Node* n = &s_->nodes[static_cast<size_t>(idx)];
  if (!n->first.has(b)) return false;
  while (n->kind == Kind::Choice) {
    int pick = -1;
    for (int a : n->alts)
      if (s_->nodes[static_cast<size_t>(a)].first.has(b)) {
        pick = a;
        break;
      }
    if (pick < 0) return false;
    idx = pick;
    n = &s_->nodes[static_cast<size_t>(idx)];
  }
  // A container needs room for itself and a child.
  if (n->container && depth_ + 2 > Schema::kMaxDepth) return false;
  switch (n->kind) {
    case Kind::Object:
      return b == '{' && push(idx, kOOpen);
    case Kind::Array:
      return b == '[' && push(idx, kAOpen);
    case Kind::String: {
      if (b != '"' || !push(idx, kSBody)) return false;
      Frame& f = f_[depth_ - 1];
      if (n->pattern >= 0) {
        const Pattern& p = s_->patterns[static_cast<size_t>(n->pattern)];
        uint64_t set = p.start(), keep = 0;
        for (int i = 0; i <= p.end(); ++i)
          if (((set >> i) & 1) && p.min_rest[static_cast<size_t>(i)] <= n->max_len &&
              p.max_rest[static_cast<size_t>(i)] >= n->min_len)
            keep |= uint64_t{1} << i;
        if (keep == 0) return false;
        f.x = keep;
      }
      return true;
    }
    case Kind::Integer:
    case Kind::Number:
      if (!push(idx, 0)) return false;
      num_len_ = 0;
      return feed_number(f_[depth_ - 1], *n, b) == Fed::Took;
    case Kind::Literal:
      if (!push(idx, 0)) return false;
      f_[depth_ - 1].m = -1;
      return feed_literal(f_[depth_ - 1], *n, b) == Fed::Took;
    case Kind::Choice:
      break;
  }
  return false;
}

bool Matcher::feed(uint8_t b) {
  if (!started_) {
    started_ = true;
    return start_value(s_->root, b);
  }
  for (;;) {
    if (depth_ == 0) return false;  // the value is finished: nothing may follow
    Frame& f = f_[depth_ - 1];
    const Node& n = node(f);
    Fed r = Fed::Refused;
    switch (n.kind) {
      case Kind::Object:
        return feed_object(f, n, b);
      case Kind::Array:
        return feed_array(f, n, b);
      case Kind::String:
        return feed_string(f, n, b);
      case Kind::Integer:
      case Kind::Number:
        r = feed_number(f, n, b);
        break;
      case Kind::Literal:
        r = feed_literal(f, n, b);
        break;
      case Kind::Choice:
        return false;
    }
    if (r != Fed::Ended) return r == Fed::Took;
    pop();  // the number or literal ended before b: its parent takes b
  }
}

int Matcher::last_candidate(const Node& n, int from) const {
  // Properties are written in order: the next one may be any up to and
  // including the first required one not yet written.
  const int np = static_cast<int>(n.props.size());
  for (int i = from; i < np; ++i)
    if (n.props[static_cast<size_t>(i)].required) return i;
  return np - 1;
}

bool Matcher::key_alive(const Node& n, const Frame& f, int c) const {
  const std::string& k = n.props[static_cast<size_t>(c)].key;
  const std::string& cur = n.props[static_cast<size_t>(f.m)].key;
  const size_t x = static_cast<size_t>(f.x);
  return k.size() >= x && std::memcmp(k.data(), cur.data(), x) == 0;
}

bool Matcher::feed_key(Frame& f, const Node& n, uint8_t b) {
  const int last = last_candidate(n, f.n);
  const size_t x = static_cast<size_t>(f.x);
  for (int c = f.n; c <= last; ++c) {
    const std::string& k = n.props[static_cast<size_t>(c)].key;
    if (k.size() <= x || static_cast<uint8_t>(k[x]) != b) continue;
    if (x > 0 && std::memcmp(k.data(), n.props[static_cast<size_t>(f.m)].key.data(), x) != 0)
      continue;
    f.m = c;
    ++f.x;
    // Keys end with their closing quote, so none is a prefix of another.
    if (f.x == k.size()) f.phase = kOColon;
    return true;
  }
  return false;
}

bool Matcher::feed_object(Frame& f, const Node& n, uint8_t b) {
  const bool free = n.free_keys;
  switch (f.phase) {
    case kOOpen:
      if (b == '}') {
        if (!free && n.req_suffix[0] > 0) return false;
        pop();
        return true;
      }
      if (b != '"') return false;
      if (free) {
        f.phase = kOKeyString;
        return start_value(s_->any_string_node(), b);
      }
      if (n.props.empty()) return false;
      f.phase = kOKey;
      f.x = 0;
      return feed_key(f, n, b);
    case kOKey:
      return feed_key(f, n, b);
    case kOColon:
      if (b != ':') return false;
      f.phase = kOAfterColon;
      f.space = 0;
      return true;
    case kOAfterColon:
      if (b == ' ' && !f.space) {
        f.space = 1;
        return true;
      }
      f.phase = kOValue;
      if (free) return start_value(n.extra, b);
      f.n = f.m + 1;
      return start_value(n.props[static_cast<size_t>(f.m)].node, b);
    case kOAfterValue:
      if (b == ',') {
        if (!free && f.n >= static_cast<int>(n.props.size())) return false;
        f.phase = kOComma;
        f.space = 0;
        return true;
      }
      if (b == '}') {
        if (!free && n.req_suffix[static_cast<size_t>(f.n)] > 0) return false;
        pop();
        return true;
      }
      return false;
    case kOComma:
      if (b == ' ' && !f.space) {
        f.space = 1;
        return true;
      }
      if (b != '"') return false;
      if (free) {
        f.phase = kOKeyString;
        return start_value(s_->any_string_node(), b);
      }
      f.phase = kOKey;
      f.x = 0;
      return feed_key(f, n, b);
    default:
      return false;
  }
}

bool Matcher::feed_array(Frame& f, const Node& n, uint8_t b) {
  switch (f.phase) {
    case kAOpen:
      if (b == ']') {
        if (n.min_items > 0) return false;
        pop();
        return true;
      }
      if (n.max_items == 0) return false;
      f.phase = kAValue;
      return start_value(n.items, b);
    case kAAfter:
      if (b == ',') {
        if (f.n >= n.max_items) return false;
        f.phase = kAComma;
        f.space = 0;
        return true;
      }
      if (b == ']') {
        if (f.n < n.min_items) return false;
        pop();
        return true;
      }
      return false;
    case kAComma:
      if (b == ' ' && !f.space) {
        f.space = 1;
        return true;
      }
      f.phase = kAValue;
      return start_value(n.items, b);
    default:
      return false;
  }
}

bool Matcher::feed_string(Frame& f, const Node& n, uint8_t b) {
  switch (f.phase) {
    case kSBody: {
      if (b == '"') {
        if (f.n < n.min_len) return false;
        if (n.pattern >= 0 && !((f.x >> s_->patterns[static_cast<size_t>(n.pattern)].end()) & 1))
          return false;
        pop();
        return true;
      }
      if (f.n + 1 > n.max_len) return false;
      if (n.pattern >= 0) {
        if (b >= 0x80) return false;
        const Pattern& p = s_->patterns[static_cast<size_t>(n.pattern)];
        const uint64_t next = p.step(f.x, b);
        const int count = f.n + 1;
        uint64_t keep = 0;
        for (int i = 0; i <= p.end(); ++i)
          if (((next >> i) & 1) && count + p.min_rest[static_cast<size_t>(i)] <= n.max_len &&
              static_cast<int64_t>(count) + p.max_rest[static_cast<size_t>(i)] >= n.min_len)
            keep |= uint64_t{1} << i;
        if (keep == 0) return false;
        f.x = keep;
        f.n = count;
        return true;
      }
      if (b == '\\') {
        f.phase = kSEscape;
        return true;
      }
      if (b < 0x20 || b == 0x7F) return false;
      if (b < 0x80) {
        ++f.n;
        return true;
      }
      // A UTF-8 lead byte: how many continuation bytes, and the range of
      // the first (which rules out overlong forms and surrogates).
      int pending = 0, lo = 0x80, hi = 0xBF;
      if (b >= 0xC2 && b <= 0xDF)
        pending = 1;
      else if (b == 0xE0)
        pending = 2, lo = 0xA0;
      else if (b == 0xED)
        pending = 2, hi = 0x9F;
      else if (b >= 0xE1 && b <= 0xEF)
        pending = 2;
      else if (b == 0xF0)
        pending = 3, lo = 0x90;
      else if (b >= 0xF1 && b <= 0xF3)
        pending = 3;
      else if (b == 0xF4)
        pending = 3, hi = 0x8F;
      else
        return false;
      ++f.n;
      f.phase = kSUtf8;
      f.m = pending | (lo << 8) | (hi << 16);
      return true;
    }
    case kSUtf8: {
      const int pending = f.m & 0xFF, lo = (f.m >> 8) & 0xFF, hi = (f.m >> 16) & 0xFF;
      if (b < lo || b > hi) return false;
      if (pending == 1) {
        f.phase = kSBody;
        f.m = 0;
      } else {
        f.m = (pending - 1) | (0x80 << 8) | (0xBF << 16);
      }
      return true;
    }
    case kSEscape:
      if (!std::strchr("\"\\/bfnrt", b) || b == 0) return false;
      ++f.n;
      f.phase = kSBody;
      return true;
    default:
      return false;
  }
}

bool Matcher::number_can_end(const Node& n) const {
  return number_completion(n, std::string_view(num_, num_len_)) == 0;
}

Matcher::Fed Matcher::feed_number(Frame& /*f*/, const Node& n, uint8_t b) {
  const std::string_view t(num_, num_len_);
  const bool neg = !t.empty() && t[0] == '-';
  const std::string_view body = neg ? t.substr(1) : t;
  const size_t dot = body.find('.');
  const bool has_dot = dot != std::string_view::npos;
  const size_t nint = has_dot ? dot : body.size();
  const size_t nfrac = has_dot ? body.size() - dot - 1 : 0;
  bool syntax = false;
  if (b == '-')
    syntax = t.empty();
  else if (b == '.')
    syntax = n.kind == Kind::Number && !has_dot && nint > 0;
  else if (b >= '0' && b <= '9') {
    if (has_dot)
      syntax = nfrac < static_cast<size_t>(kFracDigits);
    else
      syntax = !(nint == 1 && body[0] == '0') && nint < static_cast<size_t>(kIntDigits);
  }
  if (syntax) {
    num_[num_len_] = static_cast<char>(b);
    if (number_completion(n, std::string_view(num_, num_len_ + 1u)) >= 0) {
      ++num_len_;
      return Fed::Took;
    }
  }
  return number_completion(n, t) == 0 ? Fed::Ended : Fed::Refused;
}

bool Matcher::literal_can_grow(const Frame& f, const Node& n) const {
  const std::string& cur = n.literals[static_cast<size_t>(f.m)];
  const size_t pos = static_cast<size_t>(f.n);
  for (const std::string& l : n.literals)
    if (l.size() > pos && std::memcmp(l.data(), cur.data(), pos) == 0) return true;
  return false;
}

Matcher::Fed Matcher::feed_literal(Frame& f, const Node& n, uint8_t b) {
  const size_t pos = static_cast<size_t>(f.n);
  for (size_t i = 0; i < n.literals.size(); ++i) {
    const std::string& l = n.literals[i];
    if (l.size() <= pos || static_cast<uint8_t>(l[pos]) != b) continue;
    if (pos > 0 && std::memcmp(l.data(), n.literals[static_cast<size_t>(f.m)].data(), pos) != 0)
      continue;
    f.m = static_cast<int32_t>(i);
    ++f.n;
    // Whole, and no other literal goes on from here: the value is over.
    if (static_cast<size_t>(f.n) == l.size() && !literal_can_grow(f, n)) pop();
    return Fed::Took;
  }
  if (f.m >= 0 && static_cast<size_t>(f.n) == n.literals[static_cast<size_t>(f.m)].size())
    return Fed::Ended;
  return Fed::Refused;
}

bool Matcher::complete() const {
  if (finished_) return true;
  if (depth_ != 1) return false;
  const Frame& f = f_[0];
  const Node& n = node(f);
  if (n.kind == Kind::Integer || n.kind == Kind::Number) return number_can_end(n);
  if (n.kind == Kind::Literal)
    return f.m >= 0 && static_cast<size_t>(f.n) == n.literals[static_cast<size_t>(f.m)].size();
  return false;
}

int Matcher::own_rest(const Frame& f) const {
  const Node& n = node(f);
  const auto mb = [&](int idx) { return s_->nodes[static_cast<size_t>(idx)].min_bytes; };
  switch (n.kind) {
    case Kind::Object: {
      if (n.free_keys) {
        switch (f.phase) {
          case kOOpen:
            return 1;
          case kOColon:
            return 1 + mb(n.extra) + 1;
          case kOAfterColon:
            return mb(n.extra) + 1;
          case kOAfterValue:
            return 1;
          case kOComma:
            return 3 + mb(n.extra) + 1;
          default:
            return 1;
        }
      }
      const auto rs = [&](int i) { return n.req_suffix[static_cast<size_t>(i)]; };
      const auto via = [&](int c, int key_left) {
        return key_left + 1 + mb(n.props[static_cast<size_t>(c)].node) + rs(c + 1) + 1;
      };
      switch (f.phase) {
        case kOOpen:
          return (rs(0) > 0 ? rs(0) - 1 : 0) + 1;
        case kOKey: {
          int best = kUnbounded;
          for (int c = f.n, last = last_candidate(n, f.n); c <= last; ++c)
            if (key_alive(n, f, c))
              best = std::min(
                  best, via(c, static_cast<int>(n.props[static_cast<size_t>(c)].key.size() - f.x)));
          return best;
        }
        case kOColon:
          return via(f.m, 0);
        case kOAfterColon:
          return via(f.m, 0) - 1;
        case kOAfterValue:
          return rs(f.n) + 1;
        case kOComma: {
          int best = kUnbounded;
          for (int c = f.n, last = last_candidate(n, f.n); c <= last; ++c)
            best = std::min(best,
                            via(c, static_cast<int>(n.props[static_cast<size_t>(c)].key.size())));
          return best;
        }
        default:
          return 1;
      }
    }
    case Kind::Array: {
      const int mi = mb(n.items) + 1;
      switch (f.phase) {
        case kAOpen:
          return n.min_items == 0 ? 1 : n.min_items * mi;
        case kAAfter:
          return std::max(0, n.min_items - f.n) * mi + 1;
        case kAComma:
          return mi - 1 + std::max(0, n.min_items - f.n - 1) * mi + 1;
        default:
          return 1;
      }
    }
    case Kind::String: {
      int chars = std::max(0, n.min_len - f.n);
      if (n.pattern >= 0) {
        const Pattern& p = s_->patterns[static_cast<size_t>(n.pattern)];
        int best = kUnbounded;
        for (int i = 0; i <= p.end(); ++i)
          if ((f.x >> i) & 1)
            best = std::min(best, std::max(p.min_rest[static_cast<size_t>(i)], chars));
        chars = best;
      }
      if (f.phase == kSEscape) return 1 + std::max(0, chars - 1) + 1;
      if (f.phase == kSUtf8) return (f.m & 0xFF) + chars + 1;
      return chars + 1;
    }
    case Kind::Integer:
    case Kind::Number: {
      const int r = number_completion(n, std::string_view(num_, num_len_));
      return r < 0 ? kUnbounded : r;
    }
    case Kind::Literal: {
      int best = kUnbounded;
      const size_t pos = static_cast<size_t>(f.n);
      for (const std::string& l : n.literals)
        if (l.size() >= pos &&
            (f.m < 0 ||
             std::memcmp(l.data(), n.literals[static_cast<size_t>(f.m)].data(), pos) == 0))
          best = std::min(best, static_cast<int>(l.size() - pos));
      return best;
    }
    case Kind::Choice:
      return kUnbounded;
  }
  return kUnbounded;
}

int Matcher::after_child(const Frame& f) const {
  const Node& n = node(f);
  const auto mb = [&](int idx) { return s_->nodes[static_cast<size_t>(idx)].min_bytes; };
  if (n.kind == Kind::Object) {
    if (f.phase == kOKeyString) return 1 + mb(n.extra) + 1;
    if (n.free_keys) return 1;
    return n.req_suffix[static_cast<size_t>(f.n)] + 1;
  }
  const int mi = mb(n.items) + 1;
  return std::max(0, n.min_items - f.n - 1) * mi + 1;
}

int Matcher::min_close() const {
  if (!started_) return s_->nodes[static_cast<size_t>(s_->root)].min_bytes;
  if (finished_) return 0;
  int64_t total = own_rest(f_[depth_ - 1]);
  for (int i = depth_ - 2; i >= 0; --i) total += after_child(f_[i]);
  return static_cast<int>(std::min<int64_t>(total, kUnbounded));
}

bool Matcher::plain_string(PlainString* out) const {
  if (depth_ == 0) return false;
  const Frame& f = f_[depth_ - 1];
  const Node& n = node(f);
  if (n.kind != Kind::String || f.phase != kSBody || n.pattern >= 0) return false;
  *out = {f.n, n.min_len, n.max_len};
  return true;
}

void Matcher::copy_from(const Matcher& o) {
  s_ = o.s_;
  depth_ = o.depth_;
  started_ = o.started_;
  finished_ = o.finished_;
  num_len_ = o.num_len_;
  std::memcpy(num_, o.num_, sizeof(num_));
  std::memcpy(f_, o.f_, sizeof(Frame) * depth_);
}

}  // namespace edgelm::constrain
