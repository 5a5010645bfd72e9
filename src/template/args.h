// Binding a built-in's arguments by position or keyword, as Python does.
// Internal to the filters, methods and globals.
#pragma once

#include <initializer_list>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "template/value.h"

namespace edgelm::jinja {

class ArgReader {
 public:
  ArgReader(std::string_view fn, Args& a, std::initializer_list<const char*> names) : fn_(fn), a_(a), names_(names) {}

  // The argument for parameter i, or nullptr when not given.
  const Value* get(size_t i) const {
    if (i < a_.pos.size()) return &a_.pos[i];
    for (const auto& [k, v] : a_.kw)
      if (k == names_[i]) return &v;
    return nullptr;
  }
  Value get_or(size_t i, Value dflt) const {
    const Value* v = get(i);
    return v ? *v : dflt;
  }
  Status check() const {
    if (a_.pos.size() > names_.size())
      return make_error("{}() takes at most {} argument(s) ({} given)", fn_, names_.size(), a_.pos.size());
    for (const auto& [k, v] : a_.kw) {
      size_t i = 0;
      while (i < names_.size() && k != names_[i]) ++i;
      if (i == names_.size()) return make_error("{}() got an unexpected keyword argument '{}'", fn_, k);
      if (i < a_.pos.size()) return make_error("{}() got multiple values for argument '{}'", fn_, k);
    }
    return {};
  }

 private:
  std::string_view fn_;
  Args& a_;
  std::vector<const char*> names_;
};

inline Result<std::string> need_str(const Value& v, std::string_view what) {
  if (!v.is_string()) return make_error("{} must be str, not {}", what, type_name(v));
  return v.str();
}

inline Result<int64_t> need_int(const Value& v, std::string_view what) {
  if (!v.is_int() && !v.is_bool()) return make_error("{} must be an integer, not {}", what, type_name(v));
  return v.as_int();
}

}  // namespace edgelm::jinja
