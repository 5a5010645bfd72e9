// The global functions: range, dict, namespace, raise_exception, strftime_now.
#include <chrono>
#include <cmath>
#include <ctime>

#include "template/builtins.h"

namespace edgelm::jinja {

void add_globals(Scope& g) {
  g.vars["range"] = Value::function("range", [](Interpreter&, Args& a) -> Result<Value> {
    if (!a.kw.empty()) return make_error("range() takes no keyword arguments");
    if (a.pos.empty() || a.pos.size() > 3) return make_error("range expected 1 to 3 arguments, got {}", a.pos.size());
    int64_t v[3] = {0, 0, 1};
    for (size_t i = 0; i < a.pos.size(); ++i) {
      if (!a.pos[i].is_int() && !a.pos[i].is_bool())
        return make_error("'{}' object cannot be interpreted as an integer", type_name(a.pos[i]));
    }
    if (a.pos.size() == 1) v[1] = a.pos[0].as_int();
    else {
      v[0] = a.pos[0].as_int();
      v[1] = a.pos[1].as_int();
      if (a.pos.size() == 3) v[2] = a.pos[2].as_int();
    }
    if (v[2] == 0) return make_error("range() arg 3 must not be zero");
    const long double count = v[2] > 0 ? std::ceil((static_cast<long double>(v[1]) - v[0]) / v[2])
                                       : std::ceil((static_cast<long double>(v[0]) - v[1]) / -static_cast<long double>(v[2]));
    // The sandbox's MAX_RANGE.
    if (count > 100000)
      return make_error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    std::vector<Value> out;
    for (int64_t x = v[0]; v[2] > 0 ? x < v[1] : x > v[1]; x += v[2]) out.push_back(Value::integer(x));
    return Value::list(std::move(out));
  });
  auto dict_like = [](Interpreter& in, Args& a, Value target) -> Result<Value> {
    if (a.pos.size() > 1) return make_error("expected at most 1 argument, got {}", a.pos.size());
    if (!a.pos.empty()) {
      const Value& src = a.pos[0];
      if (src.is_dict() || src.is_namespace()) {
        for (const auto& [k, v] : src.dict_data().items) target.set_item(k, v);
      } else {
        EDGELM_ASSIGN(auto items, in.iterate(src));
        for (const auto& p : items) {
          if (!p.is_list() || p.items().size() != 2) return make_error("dictionary update sequence element has wrong length");
          target.set_item(p.items()[0], p.items()[1]);
        }
      }
    }
    for (auto& [k, v] : a.kw) target.set_item(Value::string(k), v);
    return target;
  };
  g.vars["dict"] = Value::function("dict", [dict_like](Interpreter& in, Args& a) { return dict_like(in, a, Value::dict()); });
  g.vars["namespace"] = Value::function("namespace", [dict_like](Interpreter& in, Args& a) -> Result<Value> {
    Value ns = Value::namespace_();
    in.track_namespace(ns);
    for (const auto& v : a.pos)
      if (v.depth() > kMaxValueDepth) return make_error("value nested deeper than {}", kMaxValueDepth);
    for (const auto& [k, v] : a.kw)
      if (v.depth() > kMaxValueDepth) return make_error("value nested deeper than {}", kMaxValueDepth);
    // A namespace's data is mutable: fill it through its own handle.
    if (a.pos.size() > 1) return make_error("expected at most 1 argument, got {}", a.pos.size());
    if (!a.pos.empty()) {
      EDGELM_ASSIGN(Value d, dict_like(in, a, Value::dict()));
      for (const auto& [k, v] : d.dict_data().items) ns.namespace_data().set(k, v);
      return ns;
    }
    for (auto& [k, v] : a.kw) ns.namespace_data().set(Value::string(k), v);
    return ns;
  });
  g.vars["raise_exception"] = Value::function("raise_exception", [](Interpreter& in, Args& a) -> Result<Value> {
    in.set_raised();
    return Error{a.pos.empty() ? std::string() : to_str(a.pos[0])};
  });
  g.vars["strftime_now"] = Value::function("strftime_now", [](Interpreter& in, Args& a) -> Result<Value> {
    if (a.pos.size() != 1 || !a.pos[0].is_string()) return make_error("strftime_now(format) needs a format string");
    std::tm tm{};
    if (in.options().now_unix) {
      const std::time_t t = static_cast<std::time_t>(*in.options().now_unix);
      gmtime_r(&t, &tm);
    } else {
      const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
      localtime_r(&t, &tm);
    }
    const std::string& f = a.pos[0].str();
    if (f.size() > 256) return make_error("strftime_now: format too long");
    std::string buf(4096, '\0');
    const size_t n = std::strftime(buf.data(), buf.size(), f.c_str(), &tm);
    if (n == 0 && !f.empty()) return Value::string("");
    buf.resize(n);
    return Value::string(std::move(buf));
  });
}


}  // namespace edgelm::jinja
