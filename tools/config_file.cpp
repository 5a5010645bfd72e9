#include "tools/config_file.h"

#include <fmt/format.h>

#include <algorithm>

// toml++ in its header-only mode: this file is the one place it is compiled,
// so the binary needs no extra library (Debian: libtomlplusplus-dev).
#if __has_include(<toml++/toml.h>)
#define TOML_HEADER_ONLY 1
#include <toml++/toml.h>
#else
#error "tools/config_file.cpp needs toml++: apt-get install libtomlplusplus-dev"
#endif

namespace edgelm::tools {

namespace {

// The text CLI11 would have received on the command line for one TOML value.
// Booleans are only for flags and flags take only booleans, so `mlock = 1`
// or `slots = true` is an error rather than a guess.
Result<std::string> scalar_text(const toml::node& v, bool flag) {
  if (flag) {
    if (const auto* b = v.as_boolean()) return std::string(b->get() ? "true" : "false");
    return make_error("is a flag: write true or false");
  }
  switch (v.type()) {
    case toml::node_type::string:
      return std::string(v.as_string()->get());
    case toml::node_type::integer:
      return fmt::format("{}", v.as_integer()->get());
    case toml::node_type::floating_point:
      return fmt::format("{}", v.as_floating_point()->get());
    case toml::node_type::boolean:
      return make_error("takes a value, not true/false");
    case toml::node_type::array:
      return make_error("takes one value, not an array");
    default:
      return make_error("takes a string or a number");
  }
}

}  // namespace

Status apply_config_file(CLI::App& cmd, const std::string& path) {
  toml::table doc;
  try {
    doc = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& at = e.source().begin;
    if (at.line == 0) return make_error("{}: {}", path, e.description());  // could not open or read
    return make_error("{}:{}:{}: {}", path, at.line, at.column, e.description());
  }
  for (const auto& [key, value] : doc) {
    const std::string where = fmt::format("{}:{}: {}", path, value.source().begin.line, key.str());
    std::string name(key.str());
    std::replace(name.begin(), name.end(), '_', '-');
    CLI::Option* opt = name.size() > 1 ? cmd.get_option_no_throw("--" + name) : nullptr;
    if (opt == nullptr || opt == cmd.get_help_ptr() || name == "config")
      return make_error("{}: unknown key (the keys are the long flags of `edgelm {} --help`)",
                        where, cmd.get_name());
    // A repeatable flag takes an array (each element one use of the flag)
    // or, for KEY=VALUE flags, a table ({ sensor = 1 } for sensor=1).
    std::vector<std::string> texts;
    const bool repeatable = opt->get_items_expected_max() > 1;
    if (const auto* arr = value.as_array(); arr && repeatable) {
      for (const auto& el : *arr) {
        auto t = scalar_text(el, false);
        if (!t.ok()) return make_error("{}: {}", where, t.message());
        texts.push_back(*t);
      }
    } else if (const auto* tbl = value.as_table(); tbl && repeatable) {
      for (const auto& [k, v] : *tbl) {
        auto t = scalar_text(v, false);
        if (!t.ok()) return make_error("{}.{}: {}", where, k.str(), t.message());
        texts.push_back(std::string(k.str()) + "=" + *t);
      }
    } else if (value.is_table()) {
      return make_error("{}: tables are only for repeatable KEY=VALUE flags", where);
    } else {
      auto text = scalar_text(value, opt->get_expected_min() == 0);
      if (!text.ok()) return make_error("{}: {}", where, text.message());
      texts.push_back(*text);
    }
    if (opt->count() > 0) continue;  // the command line said it: the flag wins
    if (texts.empty()) continue;     // an empty array: the default
    for (const std::string& t : texts) opt->add_result(t);
    const std::string text_joined = fmt::format("{}", fmt::join(texts, ","));
    const std::string* text = &text_joined;
    // Validate now, so a bad value is reported against the file and line;
    // CLI11 then skips this option's callback (it has run).
    try {
      opt->run_callback();
    } catch (const CLI::Error& e) {
      return make_error("{} = {}: {}", where, *text, e.what());
    }
  }
  return Status::Ok();
}

}  // namespace edgelm::tools
