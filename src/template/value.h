// The values a chat template computes with: Python's objects as jinja2 sees
// them (None, bool, int, float, str, list, tuple, dict, namespace, callables)
// plus jinja2's Undefined. Lists and dicts are shared, not copied: a Value is
// cheap to copy (one shared_ptr), and everything but a namespace is immutable
// once a render reads it, as in jinja2's ImmutableSandboxedEnvironment.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"

namespace edgelm::jinja {

class Value;

// Positional and keyword arguments of a call.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

class Interpreter;
// A built-in function, a bound method or a macro. The interpreter is passed
// so a macro can render its body.
using NativeFn = std::function<Result<Value>(Interpreter&, Args&)>;

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };
  // What a list-kind value is in Python: list, tuple, a generator (the
  // result of select/map/...: no len(), always true), or a dict view
  // (dict.items()/keys()/values(): len() but no indexing).
  enum class Seq : uint8_t { kList, kTuple, kGenerator, kItemsView, kKeysView, kValuesView };

  struct ListData {
    std::vector<Value> items;
  };
  // An ordered dict (Python 3.7+ order); string keys are indexed.
  struct DictData {
    std::vector<std::pair<Value, Value>> items;
    std::unordered_map<std::string, size_t> str_index;
    const Value* find(const Value& key) const;
    const Value* find(std::string_view key) const;
    void set(Value key, Value v);
  };
  struct Callable {
    std::string name;  // for messages: "macro 'm'", "range", "str.split"
    NativeFn fn;
  };

  Value() = default;  // undefined
  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value real(double d);
  static Value string(std::string s, bool markup = false);
  static Value list(std::vector<Value> items, Seq seq = Seq::kList);
  static Value tuple(std::vector<Value> items) { return list(std::move(items), Seq::kTuple); }
  static Value dict();
  static Value namespace_();
  // `depth`: the nesting of what the function holds (a bound method's object).
  static Value function(std::string name, NativeFn fn, uint32_t depth = 0);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_mapping() const { return kind_ == Kind::kDict; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  Seq seq() const { return seq_; }
  // A list or tuple: indexing, slicing, + and *.
  bool indexable() const { return kind_ == Kind::kList && (seq_ == Seq::kList || seq_ == Seq::kTuple); }
  bool is_view() const { return kind_ == Kind::kList && seq_ >= Seq::kItemsView; }
  bool is_markup() const { return markup_; }
  // Nesting of lists and dicts (0 for a scalar; a namespace counts 1, its
  // contents are cleared when the render ends). Bounded where a template
  // could grow it without limit (namespace attributes): destroying a deep
  // chain recurses.
  uint32_t depth() const { return depth_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }  // ints and bools
  double as_double() const;              // any number
  const std::string& str() const { return s_; }  // a string, or an undefined's hint
  const std::vector<Value>& items() const { return list_->items; }
  const DictData& dict_data() const { return *dict_; }
  DictData& namespace_data() const { return *dict_; }  // namespaces are mutable
  const Callable& callable() const { return *fn_; }
  // Identity of the shared list/dict/callable (jinja's `sameas`).
  const void* identity() const;

  // Building a context (the server turns a request into these). They modify
  // the shared data in place: call them only while building.
  void set(std::string_view key, Value v);  // a dict
  void set_item(Value key, Value v);        // a dict, any hashable key
  void push_back(Value v);                  // a list
  // Lookup of a dict key: nullptr when absent or not a dict.
  const Value* get(std::string_view key) const;

  // Python's bool().
  bool truthy() const;
  Value with_seq(Seq s) const;
  Value as_plain_string() const { return string(s_); }

 private:
  Kind kind_ = Kind::kUndefined;
  Seq seq_ = Seq::kList;
  bool markup_ = false;  // a markupsafe.Markup string (from |safe): `+` escapes the other side
  bool b_ = false;
  uint32_t depth_ = 0;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::shared_ptr<ListData> list_;
  std::shared_ptr<DictData> dict_;
  std::shared_ptr<Callable> fn_;
};

// The deepest list/dict nesting a namespace attribute may hold.
inline constexpr uint32_t kMaxValueDepth = 512;

// Python's str() of a value (what {{ x }} prints), and repr(). They stop
// at `max_depth` levels of nesting (a template can build a cycle through a
// namespace) and return false then.
bool append_str(std::string& out, const Value& v, int max_depth = 256);
bool append_repr(std::string& out, const Value& v, int max_depth = 256);
std::string to_str(const Value& v);
// Python's repr() of a float: shortest round trip, "1.0", "1e+16", "nan".
std::string float_repr(double d);
// A Python name for the value's type ('str', 'int', 'dict', 'NoneType').
std::string_view type_name(const Value& v);

// Python's ==, between any two values (1 == 1.0 == True).
bool equals(const Value& a, const Value& b, int max_depth = 256);

}  // namespace edgelm::jinja
