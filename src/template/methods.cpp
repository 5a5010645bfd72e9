// The methods of str, dict and list a sandboxed template may call.
#include <algorithm>
#include <cstdlib>
#include <functional>

#include "template/args.h"
#include "template/builtins.h"
#include "template/pystr.h"

namespace edgelm::jinja {

namespace {

Value bound(const Value& self, const std::string& name,
            std::function<Result<Value>(Interpreter&, const Value&, Args&)> fn) {
  return Value::function(
      std::string(type_name(self)) + "." + name,
      [self, fn = std::move(fn)](Interpreter& in, Args& a) { return fn(in, self, a); }, self.depth() + 1);
}

Value unsafe(const Value& self, const std::string& name) {
  const std::string msg = "access to attribute '" + name + "' of '" + std::string(type_name(self)) + "' object is unsafe.";
  return Value::function(name, [msg](Interpreter&, Args&) -> Result<Value> { return make_error("{}", msg); });
}

Result<std::optional<std::string>> opt_chars(const ArgReader& r, size_t i) {
  const Value* c = r.get(i);
  if (!c || c->is_none()) return std::optional<std::string>();
  EDGELM_ASSIGN(std::string s, need_str(*c, "argument"));
  return std::optional<std::string>(s);
}

Value str_list(std::vector<std::string> parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::list(std::move(out));
}

// str.format: {} {0} {name} with !r/!s; format specs are not supported.
Result<Value> str_format(Interpreter& in, const std::string& f, Args& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') ++i;
      else return make_error("Single '}}' encountered in format string");
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t e = f.find('}', i);
    if (e == std::string::npos) return make_error("Single '{{' encountered in format string");
    std::string field = f.substr(i + 1, e - i - 1);
    i = e;
    char conv = 's';
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size()) return make_error("unsupported format field '{}'", printable(field, 40));
      conv = field[bang + 1];
      field.resize(bang);
    }
    if (field.find_first_of(":.[") != std::string::npos)
      return make_error("format specs in str.format are not supported ('{}')", printable(field, 40));
    const Value* v = nullptr;
    if (field.empty()) {
      if (auto_idx >= a.pos.size()) return make_error("Replacement index {} out of range", auto_idx);
      v = &a.pos[auto_idx++];
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      const size_t k = static_cast<size_t>(std::atoll(field.c_str()));
      if (k >= a.pos.size()) return make_error("Replacement index {} out of range", k);
      v = &a.pos[k];
    } else {
      for (const auto& [k, x] : a.kw)
        if (k == field) v = &x;
      if (!v) return make_error("KeyError: '{}'", printable(field, 40));
    }
    if (conv == 'r') append_repr(out, *v);
    else if (conv == 's') append_str(out, *v);
    else return make_error("Unknown conversion specifier {}", conv);
    EDGELM_TRY(in.check_size(out.size()));
  }
  return Value::string(std::move(out));
}

std::optional<Value> str_method(const Value& self, const std::string& n) {
  using Fn = std::function<Result<Value>(Interpreter&, const Value&, Args&)>;
  Fn fn;
  if (n == "strip" || n == "lstrip" || n == "rstrip") {
    fn = [n](Interpreter&, const Value& s, Args& a) -> Result<Value> {
      ArgReader r(n, a, {"chars"});
      EDGELM_TRY(r.check());
      EDGELM_ASSIGN(auto chars, opt_chars(r, 0));
      return Value::string(pystr::strip(s.str(), chars, n != "rstrip", n != "lstrip"));
    };
  } else if (n == "split" || n == "rsplit") {
    fn = [n](Interpreter&, const Value& s, Args& a) -> Result<Value> {
      ArgReader r(n, a, {"sep", "maxsplit"});
      EDGELM_TRY(r.check());
      EDGELM_ASSIGN(auto sep, opt_chars(r, 0));
      if (sep && sep->empty()) return make_error("empty separator");
      EDGELM_ASSIGN(int64_t maxsplit, need_int(r.get_or(1, Value::integer(-1)), "maxsplit"));
      return str_list(n == "split" ? pystr::split(s.str(), sep, maxsplit) : pystr::rsplit(s.str(), sep, maxsplit));
    };
  } else if (n == "splitlines") {
    fn = [](Interpreter&, const Value& s, Args&) -> Result<Value> { return str_list(pystr::splitlines(s.str())); };
  } else if (n == "startswith" || n == "endswith") {
    fn = [n](Interpreter&, const Value& s, Args& a) -> Result<Value> {
      ArgReader r(n, a, {"prefix"});
      EDGELM_TRY(r.check());
      if (!r.get(0)) return make_error("{}() takes at least 1 argument", n);
      std::vector<Value> cands = r.get(0)->is_list() && r.get(0)->seq() == Value::Seq::kTuple
                                     ? r.get(0)->items()
                                     : std::vector<Value>{*r.get(0)};
      for (const auto& c : cands) {
        if (!c.is_string())
          return make_error("{} first arg must be str or a tuple of str, not {}", n, type_name(c));
        const std::string& x = s.str();
        const std::string& p = c.str();
        const bool hit = n == "startswith" ? x.compare(0, p.size(), p) == 0
                                           : x.size() >= p.size() && x.compare(x.size() - p.size(), p.size(), p) == 0;
        if (hit) return Value::boolean(true);
      }
      return Value::boolean(false);
    };
  } else if (n == "replace") {
    fn = [](Interpreter& in, const Value& s, Args& a) -> Result<Value> {
      ArgReader r("replace", a, {"old", "new", "count"});
      EDGELM_TRY(r.check());
      if (!r.get(0) || !r.get(1)) return make_error("replace() takes at least 2 arguments");
      EDGELM_ASSIGN(std::string old, need_str(*r.get(0), "replace() argument 1"));
      EDGELM_ASSIGN(std::string rep, need_str(*r.get(1), "replace() argument 2"));
      EDGELM_ASSIGN(int64_t count, need_int(r.get_or(2, Value::integer(-1)), "count"));
      std::string res = pystr::replace(s.str(), old, rep, count);
      EDGELM_TRY(in.check_size(res.size()));
      return Value::string(std::move(res));
    };
  } else if (n == "upper" || n == "lower" || n == "title" || n == "capitalize") {
    fn = [n](Interpreter&, const Value& s, Args&) -> Result<Value> {
      if (n == "upper") return Value::string(pystr::upper(s.str()));
      if (n == "lower") return Value::string(pystr::lower(s.str()));
      if (n == "title") return Value::string(pystr::title(s.str()));
      return Value::string(pystr::capitalize(s.str()));
    };
  } else if (n == "find" || n == "rfind" || n == "index" || n == "rindex" || n == "count") {
    fn = [n](Interpreter&, const Value& s, Args& a) -> Result<Value> {
      ArgReader r(n, a, {"sub"});
      EDGELM_TRY(r.check());
      if (!r.get(0)) return make_error("{}() takes at least 1 argument", n);
      EDGELM_ASSIGN(std::string sub, need_str(*r.get(0), "argument"));
      const std::string& x = s.str();
      if (n == "count") {
        if (sub.empty()) return Value::integer(static_cast<int64_t>(pystr::length(x)) + 1);
        int64_t c = 0;
        for (size_t p = x.find(sub); p != std::string::npos; p = x.find(sub, p + sub.size())) ++c;
        return Value::integer(c);
      }
      const size_t p = (n == "find" || n == "index") ? x.find(sub) : x.rfind(sub);
      if (p == std::string::npos) {
        if (n == "index" || n == "rindex") return make_error("substring not found");
        return Value::integer(-1);
      }
      return Value::integer(static_cast<int64_t>(pystr::length(std::string_view(x).substr(0, p))));
    };
  } else if (n == "join") {
    fn = [](Interpreter& in, const Value& s, Args& a) -> Result<Value> {
      if (a.pos.size() != 1) return make_error("join() takes exactly one argument");
      EDGELM_ASSIGN(auto items, in.iterate(a.pos[0]));
      std::string out;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].is_string())
          return make_error("sequence item {}: expected str instance, {} found", i, type_name(items[i]));
        if (i) out += s.str();
        out += items[i].str();
        EDGELM_TRY(in.check_size(out.size()));
      }
      return Value::string(std::move(out));
    };
  } else if (n == "format") {
    fn = [](Interpreter& in, const Value& s, Args& a) -> Result<Value> { return str_format(in, s.str(), a); };
  } else if (n == "isdigit" || n == "isalpha" || n == "isalnum" || n == "isspace" || n == "islower" ||
             n == "isupper") {
    fn = [n](Interpreter&, const Value& s, Args&) -> Result<Value> {
      const std::string& x = s.str();
      if (n == "islower") return Value::boolean(pystr::lower(x) == x && pystr::upper(x) != x);
      if (n == "isupper") return Value::boolean(pystr::upper(x) == x && pystr::lower(x) != x);
      if (x.empty()) return Value::boolean(false);
      for (size_t i = 0; i < x.size(); ++i) {
        const char c = x[i];
        const bool digit = c >= '0' && c <= '9';
        const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        bool ok = n == "isdigit" ? digit : n == "isalpha" ? alpha : n == "isalnum" ? digit || alpha : false;
        if (n == "isspace") {
          const size_t sp = pystr::space_at(x, i);
          if (sp == 0) return Value::boolean(false);
          i += sp - 1;
          continue;
        }
        if (!ok) return Value::boolean(false);
      }
      return Value::boolean(true);
    };
  } else {
    return std::nullopt;
  }
  return bound(self, n, std::move(fn));
}

std::optional<Value> dict_method(const Value& self, const std::string& n) {
  if (n == "items")
    return bound(self, n, [](Interpreter&, const Value& d, Args&) -> Result<Value> {
      std::vector<Value> out;
      for (const auto& [k, v] : d.dict_data().items) out.push_back(Value::tuple({k, v}));
      return Value::list(std::move(out), Value::Seq::kItemsView);
    });
  if (n == "keys" || n == "values")
    return bound(self, n, [n](Interpreter&, const Value& d, Args&) -> Result<Value> {
      std::vector<Value> out;
      for (const auto& [k, v] : d.dict_data().items) out.push_back(n == "keys" ? k : v);
      return Value::list(std::move(out), n == "keys" ? Value::Seq::kKeysView : Value::Seq::kValuesView);
    });
  if (n == "get")
    return bound(self, n, [](Interpreter&, const Value& d, Args& a) -> Result<Value> {
      ArgReader r("get", a, {"key", "default"});
      EDGELM_TRY(r.check());
      if (!r.get(0)) return make_error("get expected at least 1 argument, got 0");
      if (const Value* v = d.dict_data().find(*r.get(0))) return *v;
      return r.get_or(1, Value::none());
    });
  if (n == "copy")
    return bound(self, n, [](Interpreter&, const Value& d, Args&) -> Result<Value> {
      Value c = Value::dict();
      for (const auto& [k, v] : d.dict_data().items) c.set_item(k, v);
      return c;
    });
  for (const char* u : {"pop", "popitem", "setdefault", "update", "clear"})
    if (n == u) return unsafe(self, n);
  return std::nullopt;
}

std::optional<Value> list_method(const Value& self, const std::string& n) {
  if (n == "count" || n == "index")
    return bound(self, n, [n](Interpreter&, const Value& l, Args& a) -> Result<Value> {
      if (a.pos.size() != 1) return make_error("{}() takes exactly one argument", n);
      int64_t c = 0;
      for (size_t i = 0; i < l.items().size(); ++i)
        if (equals(l.items()[i], a.pos[0])) {
          if (n == "index") return Value::integer(static_cast<int64_t>(i));
          ++c;
        }
      if (n == "index") return make_error("value is not in list");
      return Value::integer(c);
    });
  if (n == "copy")
    return bound(self, n, [](Interpreter&, const Value& l, Args&) -> Result<Value> { return Value::list(l.items()); });
  for (const char* u : {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"})
    if (n == u) return unsafe(self, n);
  return std::nullopt;
}

}  // namespace

std::optional<Value> method(const Value& obj, const std::string& name) {
  if (obj.is_string()) return str_method(obj, name);
  if (obj.is_dict()) return dict_method(obj, name);
  if (obj.indexable()) return list_method(obj, name);
  return std::nullopt;
}

}  // namespace edgelm::jinja
