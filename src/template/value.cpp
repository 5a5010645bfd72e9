#include "template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "template/pystr.h"

namespace edgelm::jinja {

const Value* Value::DictData::find(std::string_view key) const {
  auto it = str_index.find(std::string(key));
  return it == str_index.end() ? nullptr : &items[it->second].second;
}

const Value* Value::DictData::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.str()));
  for (const auto& [k, v] : items)
    if (!k.is_string() && equals(k, key)) return &v;
  return nullptr;
}

void Value::DictData::set(Value key, Value v) {
  if (key.is_string()) {
    auto it = str_index.find(key.str());
    if (it != str_index.end()) {
      items[it->second].second = std::move(v);
      return;
    }
    str_index.emplace(key.str(), items.size());
    items.emplace_back(std::move(key), std::move(v));
    return;
  }
  for (auto& [k, old] : items)
    if (!k.is_string() && equals(k, key)) {
      old = std::move(v);
      return;
    }
  items.emplace_back(std::move(key), std::move(v));
}

Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::move(hint);
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  v.i_ = b ? 1 : 0;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::real(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = d;
  return v;
}
Value Value::string(std::string s, bool markup) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::move(s);
  v.markup_ = markup;
  return v;
}
Value Value::list(std::vector<Value> items, Seq seq) {
  Value v;
  v.kind_ = Kind::kList;
  v.seq_ = seq;
  v.list_ = std::make_shared<ListData>();
  v.list_->items = std::move(items);
  uint32_t d = 0;
  for (const auto& x : v.list_->items) d = std::max(d, x.depth_);
  v.depth_ = d + 1;
  return v;
}
Value Value::dict() {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<DictData>();
  v.depth_ = 1;
  return v;
}
Value Value::namespace_() {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.dict_ = std::make_shared<DictData>();
  v.depth_ = 1;
  return v;
}
Value Value::function(std::string name, NativeFn fn, uint32_t depth) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.depth_ = depth;
  v.fn_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

double Value::as_double() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(i_); }

const void* Value::identity() const {
  if (list_) return list_.get();
  if (dict_) return dict_.get();
  if (fn_) return fn_.get();
  return nullptr;
}

void Value::set(std::string_view key, Value v) { set_item(Value::string(std::string(key)), std::move(v)); }
void Value::set_item(Value key, Value v) {
  if (!dict_) return;
  if (kind_ == Kind::kDict) depth_ = std::max(depth_, std::max(key.depth_, v.depth_) + 1);
  dict_->set(std::move(key), std::move(v));
}
void Value::push_back(Value v) {
  if (!list_) return;
  depth_ = std::max(depth_, v.depth_ + 1);
  list_->items.push_back(std::move(v));
}
const Value* Value::get(std::string_view key) const {
  return kind_ == Kind::kDict ? dict_->find(key) : nullptr;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return f_ != 0;
    case Kind::kString: return !s_.empty();
    case Kind::kList: return seq_ == Seq::kGenerator || !list_->items.empty();
    case Kind::kDict: return !dict_->items.empty();
    case Kind::kNamespace:
    case Kind::kCallable: return true;
  }
  return false;
}

Value Value::with_seq(Seq s) const {
  Value v = *this;
  v.seq_ = s;
  return v;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout: fixed notation for
  // exponents in [-4, 16), scientific otherwise.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits.push_back(c);
  std::string out;
  if (neg) out.push_back('-');
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out.append("0.");
      out.append(static_cast<size_t>(-exp - 1), '0');
      out.append(digits);
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out.append(digits);
      out.append(static_cast<size_t>(exp) + 1 - digits.size(), '0');
      out.append(".0");
    } else {
      out.append(digits, 0, static_cast<size_t>(exp) + 1);
      out.push_back('.');
      out.append(digits, static_cast<size_t>(exp) + 1);
    }
    return out;
  }
  out.push_back(digits[0]);
  if (digits.size() > 1) {
    out.push_back('.');
    out.append(digits, 1);
  }
  char eb[16];
  std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  out.append(eb);
  return out;
}

std::string_view type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList:
      switch (v.seq()) {
        case Value::Seq::kList: return "list";
        case Value::Seq::kTuple: return "tuple";
        case Value::Seq::kGenerator: return "generator";
        case Value::Seq::kItemsView: return "dict_items";
        case Value::Seq::kKeysView: return "dict_keys";
        case Value::Seq::kValuesView: return "dict_values";
      }
      return "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kNamespace: return "Namespace";
    case Value::Kind::kCallable: return "function";
  }
  return "object";
}

namespace {

bool append_py(std::string& out, const Value& v, bool repr, int depth) {
  if (depth <= 0) return false;
  switch (v.kind()) {
    case Value::Kind::kUndefined:  // str() is "", repr() its class name
      if (repr) out += "Undefined";
      return true;
    case Value::Kind::kNone: out += "None"; return true;
    case Value::Kind::kBool: out += v.as_bool() ? "True" : "False"; return true;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return true;
    case Value::Kind::kFloat: out += float_repr(v.as_double()); return true;
    case Value::Kind::kString:
      if (repr) pystr::append_repr(out, v.str());
      else out += v.str();
      return true;
    case Value::Kind::kList: {
      if (v.seq() == Value::Seq::kGenerator) {
        out += "<generator object>";
        return true;
      }
      const bool tuple = v.seq() == Value::Seq::kTuple;
      if (v.is_view()) {
        out += type_name(v);
        out += '(';
      }
      out += tuple ? '(' : '[';
      const auto& items = v.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        if (!append_py(out, items[i], true, depth - 1)) return false;
      }
      if (tuple && items.size() == 1) out += ',';
      out += tuple ? ')' : ']';
      if (v.is_view()) out += ')';
      return true;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      if (v.is_namespace()) out += "<Namespace ";
      out += '{';
      bool first = true;
      for (const auto& [k, x] : v.dict_data().items) {
        if (!first) out += ", ";
        first = false;
        if (!append_py(out, k, true, depth - 1)) return false;
        out += ": ";
        if (!append_py(out, x, true, depth - 1)) return false;
      }
      out += '}';
      if (v.is_namespace()) out += '>';
      return true;
    }
    case Value::Kind::kCallable:
      out.append("<function ");
      out.append(v.callable().name);
      out.push_back('>');
      return true;
  }
  return true;
}

}  // namespace

bool append_str(std::string& out, const Value& v, int max_depth) { return append_py(out, v, false, max_depth); }
bool append_repr(std::string& out, const Value& v, int max_depth) { return append_py(out, v, true, max_depth); }

std::string to_str(const Value& v) {
  std::string s;
  append_str(s, v);
  return s;
}

bool equals(const Value& a, const Value& b, int max_depth) {
  if (max_depth <= 0) return false;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.str() == b.str();
    case Value::Kind::kList: {
      // A list never equals a tuple in Python.
      if ((a.seq() == Value::Seq::kTuple) != (b.seq() == Value::Seq::kTuple)) return false;
      if (!a.indexable() || !b.indexable()) return a.identity() == b.identity();
      const auto &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i], max_depth - 1)) return false;
      return true;
    }
    case Value::Kind::kDict: {
      const auto &x = a.dict_data(), &y = b.dict_data();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* o = y.find(k);
        if (!o || !equals(v, *o, max_depth - 1)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

}  // namespace edgelm::jinja
