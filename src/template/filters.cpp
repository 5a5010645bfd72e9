// jinja2's filters and tests.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "template/args.h"
#include "template/builtins.h"
#include "template/json.h"
#include "template/parser.h"
#include "template/pystr.h"

namespace edgelm::jinja {

namespace {

// soft_str: str() of anything (a Markup stays Markup).
Value soft_str(const Value& v) {
  if (v.is_string()) return v;
  return Value::string(to_str(v));
}

Result<std::string> printable_str(const Value& v) {
  std::string s;
  if (!append_str(s, v)) return make_error("value nested too deeply to print");
  return s;
}

Value generator(std::vector<Value> items) { return Value::list(std::move(items), Value::Seq::kGenerator); }

// Case-folded for comparisons (jinja2's ignore_case).
Value fold(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(pystr::lower(v.str()));
  return v;
}

// "a.b.0" -> getitem chain, as jinja2's make_attrgetter.
Result<Value> get_path(Interpreter& in, const Value& item, const Value& attribute) {
  if (attribute.is_int()) return in.get_item(item, attribute);
  EDGELM_ASSIGN(std::string path, need_str(attribute, "attribute"));
  Value cur = item;
  for (const std::string& part : pystr::split(path, std::string("."), -1)) {
    Value key = Value::string(part);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }))
      key = Value::integer(std::atoll(part.c_str()));
    EDGELM_ASSIGN(cur, in.get_item(cur, key));
  }
  return cur;
}

Result<std::vector<Value>> sorted(Interpreter& in, std::vector<Value> items, bool reverse, bool case_sensitive,
                                  const Value* attribute) {
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t i = 0; i < items.size(); ++i) {
    Value k = items[i];
    if (attribute && !attribute->is_none()) {
      EDGELM_ASSIGN(k, get_path(in, items[i], *attribute));
    }
    keyed.emplace_back(fold(k, case_sensitive), i);
  }
  std::optional<Error> err;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    if (err) return false;
    // With an attribute jinja2 sorts by a list of keys: equal keys (even
    // two Undefined) are never compared with <.
    if (attribute && !attribute->is_none() && equals(x.first, y.first)) return false;
    auto r = reverse ? less_than(y.first, x.first) : less_than(x.first, y.first);
    if (!r.ok()) {
      err = r.error();
      return false;
    }
    return *r;
  });
  if (err) return *err;
  std::vector<Value> out;
  out.reserve(items.size());
  for (const auto& k : keyed) out.push_back(items[k.second]);
  return out;
}

Result<int64_t> py_int_from_string(std::string_view text, int base, bool* ok) {
  std::string s = pystr::strip(text, std::nullopt, true, true);
  *ok = false;
  std::string digits;
  for (char c : s)
    if (c != '_') digits.push_back(c);
  if (digits.empty()) return 0;
  size_t i = 0;
  bool neg = false;
  if (digits[0] == '+' || digits[0] == '-') {
    neg = digits[0] == '-';
    i = 1;
  }
  if (base == 16 && digits.compare(i, 2, "0x") == 0) i += 2;
  if (i >= digits.size()) return 0;
  int64_t v = 0;
  for (; i < digits.size(); ++i) {
    const char c = digits[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : c >= 'A' && c <= 'Z' ? c - 'A' + 10 : 99;
    if (d >= base) return 0;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return 0;
  }
  *ok = true;
  return neg ? -v : v;
}

std::optional<double> py_float_from_string(std::string_view text) {
  std::string s = pystr::strip(text, std::nullopt, true, true);
  std::string t;
  for (char c : s)
    if (c != '_') t.push_back(c);
  if (t.empty()) return std::nullopt;
  const std::string low = pystr::lower(t);
  for (const char* w : {"nan", "+nan", "-nan"})
    if (low == w) return NAN;
  for (const char* w : {"inf", "+inf", "infinity", "+infinity"})
    if (low == w) return INFINITY;
  if (low == "-inf" || low == "-infinity") return -INFINITY;
  for (char c : t)
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return d;
}

// jinja2's do_title: capitalise each word, words split at -, whitespace and ({[<.
std::string jinja_title(std::string_view s) {
  std::string out;
  bool start = true;
  for (size_t i = 0; i < s.size();) {
    const size_t n = pystr::cp_size(s, i);
    const char c = s[i];
    const bool sep = pystr::space_at(s, i) || (n == 1 && (c == '-' || c == '(' || c == '{' || c == '[' || c == '<'));
    if (sep) {
      out.append(s.substr(i, n));
      start = true;
    } else {
      out += start ? pystr::upper(s.substr(i, n)) : pystr::lower(s.substr(i, n));
      start = false;
    }
    i += n;
  }
  return out;
}

Result<Value> filter_tojson(const Value& input, Args& args) {
  ArgReader r("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  EDGELM_TRY(r.check());
  JsonDumpOptions o;
  o.ensure_ascii = r.get_or(0, Value::boolean(false)).truthy();
  const Value ind = r.get_or(1, Value::none());
  if (ind.is_int() || ind.is_bool()) o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(ind.as_int(), 0, 64)), ' ');
  else if (ind.is_string()) o.indent = ind.str();
  else if (!ind.is_none()) return make_error("tojson: indent must be an int or a str");
  const Value sep = r.get_or(2, Value::none());
  if (!sep.is_none()) {
    if (!sep.is_list() || sep.items().size() != 2 || !sep.items()[0].is_string() || !sep.items()[1].is_string())
      return make_error("tojson: separators must be a pair of strings");
    o.item_separator = sep.items()[0].str();
    o.key_separator = sep.items()[1].str();
  }
  o.sort_keys = r.get_or(3, Value::boolean(false)).truthy();
  EDGELM_ASSIGN(std::string s, dump_json(input, o));
  return Value::string(std::move(s));
}

Result<Value> filter_indent(const Value& input, Args& args) {
  ArgReader r("indent", args, {"width", "first", "blank"});
  EDGELM_TRY(r.check());
  const Value w = r.get_or(0, Value::integer(4));
  std::string ind;
  if (w.is_string()) ind = w.str();
  else if (w.is_int() || w.is_bool()) ind = std::string(static_cast<size_t>(std::clamp<int64_t>(w.as_int(), 0, 1024)), ' ');
  else return make_error("indent: width must be an int or a str");
  const bool first = r.get_or(1, Value::boolean(false)).truthy();
  const bool blank = r.get_or(2, Value::boolean(false)).truthy();
  // jinja2 appends "\n" to the value itself: only a str works.
  if (input.is_undefined()) return make_error("{}", input.str().empty() ? "value is undefined" : input.str());
  if (!input.is_string()) return make_error("unsupported operand type(s) for +=: '{}' and 'str'", type_name(input));
  std::string s = input.str();
  s += "\n";
  const auto lines = pystr::splitlines(s);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + ind;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += ind;
      rv += lines[i];
    }
  }
  if (first) rv = ind + rv;
  return Value::string(std::move(rv), input.is_markup());
}

Result<Value> filter_int(const Value& input, Args& args) {
  ArgReader r("int", args, {"default", "base"});
  EDGELM_TRY(r.check());
  const Value dflt = r.get_or(0, Value::integer(0));
  EDGELM_ASSIGN(int64_t base, need_int(r.get_or(1, Value::integer(10)), "base"));
  if (input.is_undefined()) return make_error("{}", input.str().empty() ? "value is undefined" : input.str());
  if (input.is_int() || input.is_bool()) return Value::integer(input.as_int());
  if (input.is_float()) {
    const double d = input.as_double();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return dflt;
    return Value::integer(static_cast<int64_t>(d));
  }
  if (input.is_string()) {
    bool ok = false;
    EDGELM_ASSIGN(int64_t v, py_int_from_string(input.str(), static_cast<int>(std::clamp<int64_t>(base, 2, 36)), &ok));
    if (ok) return Value::integer(v);
    if (auto d = py_float_from_string(input.str()); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18)
      return Value::integer(static_cast<int64_t>(*d));
  }
  return dflt;
}

Result<Value> filter_float(const Value& input, Args& args) {
  ArgReader r("float", args, {"default"});
  EDGELM_TRY(r.check());
  const Value dflt = r.get_or(0, Value::real(0.0));
  if (input.is_undefined()) return make_error("{}", input.str().empty() ? "value is undefined" : input.str());
  if (input.is_number()) return Value::real(input.as_double());
  if (input.is_string())
    if (auto d = py_float_from_string(input.str())) return Value::real(*d);
  return dflt;
}

Result<Value> filter_round(const Value& input, Args& args) {
  ArgReader r("round", args, {"precision", "method"});
  EDGELM_TRY(r.check());
  EDGELM_ASSIGN(int64_t prec, need_int(r.get_or(0, Value::integer(0)), "precision"));
  const Value method = r.get_or(1, Value::string("common"));
  if (!method.is_string() || (method.str() != "common" && method.str() != "ceil" && method.str() != "floor"))
    return make_error("method must be common, ceil or floor");
  if (!input.is_number()) return make_error("type {} doesn't define __round__ method", type_name(input));
  if (method.str() == "common" && !input.is_float()) return Value::integer(input.as_int());
  const double scale = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(prec, -300, 300)));
  const double x = input.as_double() * scale;
  double y;
  if (method.str() == "ceil") y = std::ceil(x);
  else if (method.str() == "floor") y = std::floor(x);
  else y = std::nearbyint(x);  // round half to even, as Python
  return Value::real(y / scale);
}

Result<Value> filter_map(Interpreter& in, const Value& input, Args& args) {
  // jinja2 maps nothing over a false value (None, an empty list).
  if (!input.truthy()) return generator({});
  EDGELM_ASSIGN(auto items, in.iterate(input));
  std::vector<Value> out;
  const Value* attribute = nullptr;
  const Value* dflt = nullptr;
  for (const auto& [k, v] : args.kw) {
    if (k == "attribute") attribute = &v;
    else if (k == "default") dflt = &v;
  }
  if (attribute || args.pos.empty()) {
    if (!attribute) return make_error("map requires a filter name or attribute=");
    for (const auto& x : items) {
      EDGELM_ASSIGN(Value v, get_path(in, x, *attribute));
      if (v.is_undefined() && dflt) v = *dflt;
      out.push_back(std::move(v));
    }
    return generator(std::move(out));
  }
  EDGELM_ASSIGN(std::string name, need_str(args.pos[0], "map filter name"));
  if (filter_support(name) != Support::kSupported) return make_error("no filter named '{}'", name);
  Args rest;
  rest.pos.assign(args.pos.begin() + 1, args.pos.end());
  rest.kw = args.kw;
  for (const auto& x : items) {
    Args a = rest;
    EDGELM_ASSIGN(Value v, apply_filter(in, name, x, a));
    out.push_back(std::move(v));
  }
  return generator(std::move(out));
}

// select/reject (by_attr false) and selectattr/rejectattr (true).
Result<Value> filter_select(Interpreter& in, const Value& input, Args& args, bool by_attr, bool keep_if) {
  // jinja2 selects nothing from a false value (None, an empty list).
  if (!input.truthy()) return generator({});
  EDGELM_ASSIGN(auto items, in.iterate(input));
  size_t p = 0;
  Value attribute;
  if (by_attr) {
    if (args.pos.empty()) return make_error("missing attribute");
    attribute = args.pos[p++];
  }
  std::optional<std::string> test;
  if (p < args.pos.size()) {
    EDGELM_ASSIGN(std::string t, need_str(args.pos[p++], "test name"));
    if (test_support(t) != Support::kSupported) return make_error("no test named '{}'", t);
    test = t;
  }
  Args targs;
  targs.pos.assign(args.pos.begin() + static_cast<std::ptrdiff_t>(p), args.pos.end());
  targs.kw = args.kw;
  std::vector<Value> out;
  for (const auto& x : items) {
    Value v = x;
    if (by_attr) {
      EDGELM_ASSIGN(v, get_path(in, x, attribute));
    }
    bool r;
    if (test) {
      Args a = targs;
      EDGELM_ASSIGN(r, apply_test(in, *test, v, a));
    } else {
      r = v.truthy();
    }
    if (r == keep_if) out.push_back(x);
  }
  return generator(std::move(out));
}

Result<Value> filter_minmax(Interpreter& in, const Value& input, Args& args, bool want_max) {
  ArgReader r(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  EDGELM_TRY(r.check());
  const bool cs = r.get_or(0, Value::boolean(false)).truthy();
  const Value* attr = r.get(1);
  EDGELM_ASSIGN(auto items, in.iterate(input));
  if (items.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < items.size(); ++i) {
    Value k = items[i];
    if (attr && !attr->is_none()) {
      EDGELM_ASSIGN(k, get_path(in, items[i], *attr));
    }
    k = fold(k, cs);
    if (i == 0) {
      best_key = k;
      continue;
    }
    EDGELM_ASSIGN(bool better, want_max ? less_than(best_key, k) : less_than(k, best_key));
    if (better) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

}  // namespace

Result<bool> less_than(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if (a.indexable() && b.indexable() && a.seq() == b.seq()) {
    const auto &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return make_error("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b));
}

Result<Value> percent_format(Interpreter& in, const Value& fmt_v, const Value& args_v) {
  const std::string& f = fmt_v.str();
  std::vector<Value> pos;
  const Value* mapping = nullptr;
  // A tuple spreads; anything else is one argument. A dict is also the
  // mapping for %(name)s, and (as any object with __getitem__ but a str)
  // makes unconverted arguments no error.
  if (args_v.is_list() && args_v.seq() == Value::Seq::kTuple) {
    pos = args_v.items();
  } else {
    pos.push_back(args_v);
    if (args_v.is_dict()) mapping = &args_v;
  }
  const bool lenient = args_v.is_dict() || (args_v.is_list() && args_v.seq() == Value::Seq::kList);
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out.push_back(f[i]);
      continue;
    }
    if (++i >= f.size()) return make_error("incomplete format");
    const Value* arg = nullptr;
    if (f[i] == '(') {
      const size_t e = f.find(')', i);
      if (e == std::string::npos || !mapping) return make_error("format requires a mapping");
      arg = mapping->dict_data().find(std::string_view(f).substr(i + 1, e - i - 1));
      if (!arg) return make_error("KeyError: '{}'", f.substr(i + 1, e - i - 1));
      i = e + 1;
    }
    std::string flags;
    while (i < f.size() && std::string("-+ 0#").find(f[i]) != std::string::npos) flags.push_back(f[i++]);
    int width = 0, prec = -1;
    while (i < f.size() && f[i] >= '0' && f[i] <= '9') width = std::min(width * 10 + (f[i++] - '0'), 10000);
    if (i < f.size() && f[i] == '.') {
      prec = 0;
      ++i;
      while (i < f.size() && f[i] >= '0' && f[i] <= '9') prec = std::min(prec * 10 + (f[i++] - '0'), 100);
    }
    if (i >= f.size()) return make_error("incomplete format");
    const char conv = f[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (!arg) {
      if (next >= pos.size()) return make_error("not enough arguments for format string");
      arg = &pos[next++];
    }
    std::string piece;
    switch (conv) {
      case 's': piece = to_str(*arg); break;
      case 'r': append_repr(piece, *arg); break;
      case 'd':
      case 'i':
        if (!arg->is_number()) return make_error("%{} format: a real number is required, not {}", conv, type_name(*arg));
        piece = std::to_string(arg->is_float() ? static_cast<int64_t>(arg->as_double()) : arg->as_int());
        break;
      case 'f': {
        if (!arg->is_number()) return make_error("must be real number, not {}", type_name(*arg));
        char buf[512];
        std::snprintf(buf, sizeof(buf), "%.*f", prec < 0 ? 6 : prec, arg->as_double());
        piece = buf;
        break;
      }
      default: return make_error("unsupported format character '{}'", printable(std::string(1, conv)));
    }
    if (prec >= 0 && conv == 's' && piece.size() > static_cast<size_t>(prec)) piece.resize(static_cast<size_t>(prec));
    if (static_cast<int>(pystr::length(piece)) < width) {
      const std::string padding(static_cast<size_t>(width) - pystr::length(piece), flags.find('0') != std::string::npos && conv != 's' ? '0' : ' ');
      piece = flags.find('-') != std::string::npos ? piece + padding : padding + piece;
    }
    out += piece;
    EDGELM_TRY(in.check_size(out.size()));
  }
  if (!lenient && next < pos.size()) return make_error("not all arguments converted during string formatting");
  return Value::string(std::move(out));
}

Result<Value> apply_filter(Interpreter& in, const std::string& name, const Value& input, Args& args) {
  const std::string& n = name;
  if (n == "tojson") return filter_tojson(input, args);
  if (n == "length" || n == "count") {
    switch (input.kind()) {
      case Value::Kind::kUndefined: return Value::integer(0);
      case Value::Kind::kString: return Value::integer(static_cast<int64_t>(pystr::length(input.str())));
      case Value::Kind::kList:
        if (input.seq() == Value::Seq::kGenerator) break;  // views have a len()
        return Value::integer(static_cast<int64_t>(input.items().size()));
      case Value::Kind::kDict: return Value::integer(static_cast<int64_t>(input.dict_data().items.size()));
      default: break;
    }
    return make_error("object of type '{}' has no len()", type_name(input));
  }
  if (n == "default" || n == "d") {
    ArgReader r(n, args, {"default_value", "boolean"});
    EDGELM_TRY(r.check());
    const bool boolean = r.get_or(1, Value::boolean(false)).truthy();
    if (input.is_undefined() || (boolean && !input.truthy())) return r.get_or(0, Value::string(""));
    return input;
  }
  if (n == "string") return soft_str(input);
  if (n == "safe") {
    EDGELM_ASSIGN(std::string s, printable_str(input));
    return Value::string(std::move(s), true);
  }
  if (n == "escape" || n == "e" || n == "forceescape") {
    if (input.is_markup() && n != "forceescape") return input;
    EDGELM_ASSIGN(std::string s, printable_str(input));
    return Value::string(pystr::html_escape(s), true);
  }
  if (n == "trim") {
    ArgReader r(n, args, {"chars"});
    EDGELM_TRY(r.check());
    std::optional<std::string> chars;
    if (const Value* c = r.get(0); c && !c->is_none()) {
      EDGELM_ASSIGN(chars, need_str(*c, "chars"));
    }
    EDGELM_ASSIGN(std::string s, printable_str(input));
    return Value::string(pystr::strip(s, chars, true, true), input.is_markup());
  }
  if (n == "upper" || n == "lower" || n == "capitalize" || n == "title") {
    EDGELM_ASSIGN(std::string s, printable_str(input));
    if (n == "upper") return Value::string(pystr::upper(s));
    if (n == "lower") return Value::string(pystr::lower(s));
    if (n == "capitalize") return Value::string(pystr::capitalize(s));
    return Value::string(jinja_title(s));
  }
  if (n == "replace") {
    ArgReader r(n, args, {"old", "new", "count"});
    EDGELM_TRY(r.check());
    if (!r.get(0) || !r.get(1)) return make_error("replace() needs old and new");
    EDGELM_ASSIGN(std::string s, printable_str(input));
    const Value cnt = r.get_or(2, Value::none());
    int64_t count = -1;
    if (!cnt.is_none()) {
      EDGELM_ASSIGN(count, need_int(cnt, "count"));
    }
    std::string res = pystr::replace(s, to_str(*r.get(0)), to_str(*r.get(1)), count);
    EDGELM_TRY(in.check_size(res.size()));
    return Value::string(std::move(res));
  }
  if (n == "join") {
    ArgReader r(n, args, {"d", "attribute"});
    EDGELM_TRY(r.check());
    const std::string sep = to_str(r.get_or(0, Value::string("")));
    EDGELM_ASSIGN(auto items, in.iterate(input));
    const Value* attr = r.get(1);
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += sep;
      Value v = items[i];
      if (attr && !attr->is_none()) {
        EDGELM_ASSIGN(v, get_path(in, v, *attr));
      }
      if (!append_str(out, v)) return make_error("value nested too deeply to print");
      EDGELM_TRY(in.check_size(out.size()));
    }
    return Value::string(std::move(out));
  }
  if (n == "list") {
    EDGELM_ASSIGN(auto items, in.iterate(input));
    return Value::list(std::move(items));
  }
  if (n == "first") {
    EDGELM_ASSIGN(auto items, in.iterate(input));
    if (items.empty()) return Value::undefined("No first item, sequence was empty.");
    return items.front();
  }
  if (n == "last") {
    if (input.is_list() && input.seq() == Value::Seq::kGenerator)
      return make_error("'generator' object is not reversible");
    EDGELM_ASSIGN(auto items, in.iterate(input));
    if (items.empty()) return Value::undefined("No last item, sequence was empty.");
    return items.back();
  }
  if (n == "items") {
    if (input.is_undefined()) return generator({});
    if (!input.is_dict()) return make_error("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [k, v] : input.dict_data().items) out.push_back(Value::tuple({k, v}));
    return generator(std::move(out));
  }
  if (n == "dictsort") {
    ArgReader r(n, args, {"case_sensitive", "by", "reverse"});
    EDGELM_TRY(r.check());
    if (!input.is_dict()) return make_error("dictsort: a mapping is required, not {}", type_name(input));
    const bool cs = r.get_or(0, Value::boolean(false)).truthy();
    const Value by = r.get_or(1, Value::string("key"));
    const bool reverse = r.get_or(2, Value::boolean(false)).truthy();
    int pos;
    if (by.is_string() && by.str() == "key") pos = 0;
    else if (by.is_string() && by.str() == "value") pos = 1;
    else return make_error("You can only sort by either \"key\" or \"value\"");
    std::vector<Value> pairs;
    for (const auto& [k, v] : input.dict_data().items) pairs.push_back(Value::tuple({k, v}));
    const Value attr = Value::integer(pos);
    EDGELM_ASSIGN(auto out, sorted(in, std::move(pairs), reverse, cs, &attr));
    return Value::list(std::move(out));
  }
  if (n == "sort") {
    ArgReader r(n, args, {"reverse", "case_sensitive", "attribute"});
    EDGELM_TRY(r.check());
    EDGELM_ASSIGN(auto items, in.iterate(input));
    EDGELM_ASSIGN(auto out, sorted(in, std::move(items), r.get_or(0, Value::boolean(false)).truthy(),
                                   r.get_or(1, Value::boolean(false)).truthy(), r.get(2)));
    return Value::list(std::move(out));
  }
  if (n == "unique") {
    ArgReader r(n, args, {"case_sensitive", "attribute"});
    EDGELM_TRY(r.check());
    const bool cs = r.get_or(0, Value::boolean(false)).truthy();
    const Value* attr = r.get(1);
    EDGELM_ASSIGN(auto items, in.iterate(input));
    std::vector<Value> out, seen;
    for (const auto& x : items) {
      Value k = x;
      if (attr && !attr->is_none()) {
        EDGELM_ASSIGN(k, get_path(in, x, *attr));
      }
      k = fold(k, cs);
      if (k.is_dict() || (k.is_list() && k.seq() == Value::Seq::kList))
        return make_error("unhashable type: '{}'", type_name(k));
      bool dup = false;
      for (const auto& s : seen)
        if (equals(s, k)) {
          dup = true;
          break;
        }
      if (dup) continue;
      seen.push_back(k);
      out.push_back(x);
    }
    return generator(std::move(out));
  }
  if (n == "min") return filter_minmax(in, input, args, false);
  if (n == "max") return filter_minmax(in, input, args, true);
  if (n == "reverse") {
    if (input.is_string()) {
      const auto off = pystr::offsets(input.str());
      std::string s;
      for (size_t i = off.size() - 1; i > 0; --i) s.append(input.str(), off[i - 1], off[i] - off[i - 1]);
      return Value::string(std::move(s));
    }
    EDGELM_ASSIGN(auto items, in.iterate(input));
    if (input.is_list() && input.seq() == Value::Seq::kGenerator) return make_error("argument to reversed() must be a sequence");
    std::reverse(items.begin(), items.end());
    return generator(std::move(items));
  }
  if (n == "map") return filter_map(in, input, args);
  if (n == "select") return filter_select(in, input, args, false, true);
  if (n == "reject") return filter_select(in, input, args, false, false);
  if (n == "selectattr") return filter_select(in, input, args, true, true);
  if (n == "rejectattr") return filter_select(in, input, args, true, false);
  if (n == "int") return filter_int(input, args);
  if (n == "float") return filter_float(input, args);
  if (n == "round") return filter_round(input, args);
  if (n == "indent") return filter_indent(input, args);
  if (n == "abs") {
    if (input.is_float()) return Value::real(std::fabs(input.as_double()));
    if (input.is_int() || input.is_bool()) {
      if (input.as_int() == INT64_MIN) return make_error("integer overflow");
      return Value::integer(std::llabs(input.as_int()));
    }
    return make_error("bad operand type for abs(): '{}'", type_name(input));
  }
  if (n == "sum") {
    ArgReader r(n, args, {"attribute", "start"});
    EDGELM_TRY(r.check());
    EDGELM_ASSIGN(auto items, in.iterate(input));
    Value total = r.get_or(1, Value::integer(0));
    const Value* attr = r.get(0);
    for (const auto& x : items) {
      Value v = x;
      if (attr && !attr->is_none()) {
        EDGELM_ASSIGN(v, get_path(in, x, *attr));
      }
      if (!total.is_number() || !v.is_number())
        return make_error("unsupported operand type(s) for +: '{}' and '{}'", type_name(total), type_name(v));
      if (total.is_float() || v.is_float()) total = Value::real(total.as_double() + v.as_double());
      else {
        int64_t s = 0;
        if (__builtin_add_overflow(total.as_int(), v.as_int(), &s)) return make_error("integer overflow");
        total = Value::integer(s);
      }
    }
    return total;
  }
  if (n == "attr") {
    ArgReader r(n, args, {"name"});
    EDGELM_TRY(r.check());
    if (!r.get(0)) return make_error("attr() needs a name");
    EDGELM_ASSIGN(std::string a, need_str(*r.get(0), "attribute name"));
    if (input.is_namespace()) return in.get_attr(input, a);
    if (input.is_undefined()) return in.get_attr(input, a);
    if (auto m = method(input, a)) return *m;
    return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(input), a));
  }
  if (n == "batch" || n == "slice") {
    ArgReader r(n, args, {n == "batch" ? "linecount" : "slices", "fill_with"});
    EDGELM_TRY(r.check());
    if (!r.get(0)) return make_error("{}() needs a count", n);
    EDGELM_ASSIGN(int64_t count, need_int(*r.get(0), "count"));
    if (count <= 0) return make_error("{}: the count must be positive", n);
    const Value* fill = r.get(1);
    if (fill && fill->is_none()) fill = nullptr;
    EDGELM_ASSIGN(auto items, in.iterate(input));
    std::vector<Value> groups;
    if (n == "batch") {
      // Groups of `count`; the last padded with fill_with when given.
      for (size_t i = 0; i < items.size(); i += static_cast<size_t>(count)) {
        std::vector<Value> g(items.begin() + static_cast<std::ptrdiff_t>(i),
                             items.begin() + static_cast<std::ptrdiff_t>(std::min(items.size(), i + static_cast<size_t>(count))));
        while (fill && g.size() < static_cast<size_t>(count)) g.push_back(*fill);
        groups.push_back(Value::list(std::move(g)));
      }
    } else {
      // `count` columns; the first (len % count) one longer, the others padded.
      const size_t len = items.size(), k = static_cast<size_t>(std::min<int64_t>(count, 1 << 20));
      const size_t per = len / k, extra = len % k;
      size_t offset = 0;
      for (size_t i = 0; i < k; ++i) {
        const size_t start = offset + i * per;
        if (i < extra) ++offset;
        const size_t end = offset + (i + 1) * per;
        std::vector<Value> g(items.begin() + static_cast<std::ptrdiff_t>(start), items.begin() + static_cast<std::ptrdiff_t>(end));
        if (fill && i >= extra) g.push_back(*fill);
        groups.push_back(Value::list(std::move(g)));
      }
    }
    return generator(std::move(groups));
  }
  if (n == "center") {
    ArgReader r(n, args, {"width"});
    EDGELM_TRY(r.check());
    EDGELM_ASSIGN(int64_t width, need_int(r.get_or(0, Value::integer(80)), "width"));
    EDGELM_ASSIGN(std::string s, printable_str(input));
    const auto len = static_cast<int64_t>(pystr::length(s));
    if (width <= len) return Value::string(std::move(s));
    EDGELM_TRY(in.check_size(static_cast<size_t>(width)));
    // Python's str.center: the odd space goes left when the width is odd... as CPython computes it.
    const int64_t marg = width - len;
    const int64_t left = marg / 2 + (marg & width & 1);
    return Value::string(std::string(static_cast<size_t>(left), ' ') + s +
                         std::string(static_cast<size_t>(marg - left), ' '));
  }
  if (n == "wordcount") {
    EDGELM_ASSIGN(std::string s, printable_str(input));
    // Runs of word characters (letters, digits, _; any non-ASCII letter counts).
    int64_t words = 0;
    bool in_word = false;
    for (size_t i = 0; i < s.size();) {
      const size_t len = pystr::cp_size(s, i);
      const unsigned char c = static_cast<unsigned char>(s[i]);
      const bool w = (len > 1 && !pystr::space_at(s, i)) || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                     (c >= 'A' && c <= 'Z') || c == '_';
      if (w && !in_word) ++words;
      in_word = w;
      i += len;
    }
    return Value::integer(words);
  }
  if (n == "truncate") {
    ArgReader r(n, args, {"length", "killwords", "end", "leeway"});
    EDGELM_TRY(r.check());
    EDGELM_ASSIGN(int64_t length, need_int(r.get_or(0, Value::integer(255)), "length"));
    const bool killwords = r.get_or(1, Value::boolean(false)).truthy();
    const std::string end = to_str(r.get_or(2, Value::string("...")));
    EDGELM_ASSIGN(int64_t leeway, need_int(r.get_or(3, Value::integer(5)), "leeway"));
    const auto end_len = static_cast<int64_t>(pystr::length(end));
    // jinja2 takes len() of the value itself: a short list comes back as it
    // is, a number has no len().
    if (input.is_undefined()) return input;
    if (!input.is_string()) {
      const bool sized = input.indexable() || input.is_view() || input.is_dict();
      if (!sized) return make_error("object of type '{}' has no len()", type_name(input));
      const size_t count = input.is_dict() ? input.dict_data().items.size() : input.items().size();
      if (static_cast<int64_t>(count) <= length + leeway) return input;
      return make_error("truncate: a {} cannot be cut", type_name(input));
    }
    std::string s = input.str();
    if (length < end_len) return make_error("expected length >= {}, got {}", end_len, length);
    if (leeway < 0) return make_error("expected leeway >= 0, got {}", leeway);
    const auto off = pystr::offsets(s);
    const auto len = static_cast<int64_t>(off.size() - 1);
    if (len <= length + leeway) return Value::string(std::move(s));
    std::string head = s.substr(0, off[static_cast<size_t>(length - end_len)]);
    if (!killwords) {
      const size_t sp = head.rfind(' ');
      if (sp != std::string::npos) head.resize(sp);
    }
    return Value::string(head + end);
  }
  if (n == "format") {
    if (!args.pos.empty() && !args.kw.empty())
      return make_error("can't handle positional and keyword arguments at the same time");
    Value fmt = soft_str(input);
    if (!args.kw.empty()) {
      Value d = Value::dict();
      for (auto& [k, v] : args.kw) d.set(k, v);
      return percent_format(in, fmt, d);
    }
    return percent_format(in, fmt, Value::tuple(args.pos));
  }
  return make_error("no filter named '{}'", name);
}

Result<bool> apply_test(Interpreter& in, const std::string& n, const Value& v, Args& args) {
  (void)in;
  auto arg = [&](size_t i) -> Result<Value> {
    if (i < args.pos.size()) return args.pos[i];
    if (!args.kw.empty() && i == 0) return args.kw[0].second;
    return make_error("test '{}' needs an argument", n);
  };
  if (n == "defined") return !v.is_undefined();
  if (n == "undefined") return v.is_undefined();
  if (n == "none") return v.is_none();
  if (n == "string") return v.is_string();
  if (n == "number") return v.is_number();
  if (n == "integer") return v.is_int();
  if (n == "float") return v.is_float();
  if (n == "boolean") return v.is_bool();
  if (n == "true") return v.is_bool() && v.as_bool();
  if (n == "false") return v.is_bool() && !v.as_bool();
  if (n == "mapping") return v.is_dict();
  if (n == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  // Undefined has __len__, __getitem__ (via __getattr__) and __call__.
  if (n == "sequence")
    return v.is_undefined() || v.is_string() || v.is_dict() || v.indexable();
  if (n == "callable") return v.is_callable() || v.is_undefined();
  if (n == "escaped") return v.is_markup();
  if (n == "lower" || n == "upper") {  // str(value).islower() / isupper()
    const std::string s = to_str(v);
    const std::string lo = pystr::lower(s), up = pystr::upper(s);
    return n == "lower" ? (lo == s && up != s) : (up == s && lo != s);
  }
  if (n == "odd" || n == "even") {
    // value % 2 == 1 (or 0), with Python's modulo.
    if (v.is_float()) {
      double m = std::fmod(v.as_double(), 2.0);
      if (m < 0) m += 2.0;
      return m == (n == "odd" ? 1.0 : 0.0);
    }
    if (!v.is_int() && !v.is_bool()) return make_error("test '{}' needs a number, not {}", n, type_name(v));
    return (v.as_int() % 2 != 0) == (n == "odd");
  }
  if (n == "divisibleby") {
    EDGELM_ASSIGN(Value d, arg(0));
    if (!v.is_number() || !d.is_number()) return make_error("divisibleby needs numbers");
    if (d.as_double() == 0) return make_error("integer division or modulo by zero");
    if (v.is_float() || d.is_float()) return std::fmod(v.as_double(), d.as_double()) == 0;
    return v.as_int() % d.as_int() == 0;
  }
  if (n == "sameas") {
    EDGELM_ASSIGN(Value o, arg(0));
    if (v.kind() != o.kind()) return false;
    switch (v.kind()) {
      case Value::Kind::kNone:
      case Value::Kind::kUndefined: return v.is_none();
      case Value::Kind::kBool: return v.as_bool() == o.as_bool();
      case Value::Kind::kInt: return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
      case Value::Kind::kString: return v.str() == o.str();
      case Value::Kind::kFloat: return false;
      default: return v.identity() == o.identity();
    }
  }
  if (n == "filter" || n == "test") {
    EDGELM_ASSIGN(Value o, arg(0));
    if (!o.is_string()) return false;
    return (n == "filter" ? filter_support(o.str()) : test_support(o.str())) == Support::kSupported;
  }
  if (n == "in") {
    EDGELM_ASSIGN(Value seq, arg(0));
    if (seq.is_string()) {
      if (!v.is_string()) return make_error("'in <string>' requires string as left operand, not {}", type_name(v));
      return seq.str().find(v.str()) != std::string::npos;
    }
    if (seq.is_dict()) return seq.dict_data().find(v) != nullptr;
    if (seq.is_list()) {
      for (const auto& x : seq.items())
        if (equals(x, v)) return true;
      return false;
    }
    if (seq.is_undefined()) return false;
    return make_error("argument of type '{}' is not iterable", type_name(seq));
  }
  if (n == "eq" || n == "equalto" || n == "==") {
    EDGELM_ASSIGN(Value o, arg(0));
    return equals(v, o);
  }
  if (n == "ne" || n == "!=") {
    EDGELM_ASSIGN(Value o, arg(0));
    return !equals(v, o);
  }
  if (n == "lt" || n == "lessthan" || n == "<" || n == "gt" || n == "greaterthan" || n == ">" || n == "le" ||
      n == "<=" || n == "ge" || n == ">=") {
    EDGELM_ASSIGN(Value o, arg(0));
    if (v.is_undefined() || o.is_undefined()) return make_error("value is undefined");
    if (n == "lt" || n == "lessthan" || n == "<") return less_than(v, o);
    if (n == "gt" || n == "greaterthan" || n == ">") return less_than(o, v);
    if (n == "le" || n == "<=") {
      EDGELM_ASSIGN(bool r, less_than(o, v));
      return !r;
    }
    EDGELM_ASSIGN(bool r, less_than(v, o));
    return !r;
  }
  return make_error("no test named '{}'", n);
}

}  // namespace edgelm::jinja
