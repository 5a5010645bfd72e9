#include "serve/json_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string_view>

#include "constrain/matcher.h"

namespace edgelm::serve {

namespace {

using ojson = nlohmann::ordered_json;
using constrain::ByteSet;
using constrain::Kind;
using constrain::Node;
using constrain::Pattern;
using constrain::PatternStep;
using constrain::Rep;
using constrain::Schema;

const std::set<std::string_view>& annotations() {
  static const std::set<std::string_view> s = {
      "title",    "description", "$schema",  "$id",       "$comment", "default",
      "examples", "deprecated",  "readOnly", "writeOnly", "$defs",    "definitions"};
  return s;
}

enum class Family { None, Object, Array, String, Number, Combinator };

Family family_of(std::string_view k) {
  if (k == "properties" || k == "required" || k == "additionalProperties") return Family::Object;
  if (k == "items" || k == "minItems" || k == "maxItems" || k == "uniqueItems")
    return Family::Array;
  if (k == "minLength" || k == "maxLength" || k == "pattern" || k == "format")
    return Family::String;
  if (k == "minimum" || k == "maximum" || k == "exclusiveMinimum" || k == "exclusiveMaximum")
    return Family::Number;
  if (k == "anyOf" || k == "oneOf" || k == "$ref") return Family::Combinator;
  return Family::None;
}

bool handled(std::string_view k) {
  return k == "type" || k == "enum" || k == "const" || family_of(k) != Family::None;
}

// Printable ASCII but the two characters a JSON string would have to escape.
ByteSet printable() {
  ByteSet s;
  for (int b = 0x20; b < 0x7F; ++b)
    if (b != '"' && b != '\\') s.add(static_cast<uint8_t>(b));
  return s;
}

ByteSet intersect(const ByteSet& a, const ByteSet& b) {
  ByteSet r;
  for (int i = 0; i < 4; ++i) r.w[i] = a.w[i] & b.w[i];
  return r;
}

ByteSet complement_printable(const ByteSet& a) {
  ByteSet r;
  const ByteSet p = printable();
  for (int i = 0; i < 4; ++i) r.w[i] = p.w[i] & ~a.w[i];
  return r;
}

ByteSet digits() {
  ByteSet s;
  s.add_range('0', '9');
  return s;
}

ByteSet word() {
  ByteSet s = digits();
  s.add_range('a', 'z');
  s.add_range('A', 'Z');
  s.add('_');
  return s;
}

// The pattern subset: a chain of literal characters, '.', classes [...],
// \d \w \s \D \W \S and escaped punctuation, each optionally followed by
// ? * + {n} {n,} {n,m} (a trailing lazy '?' matches the same strings).
// Anchors ^ and $ at the ends only. Generated strings match the whole
// chain, which satisfies the pattern anchored or not.
std::string compile_pattern(std::string_view re, Pattern& out) {
  size_t i = 0;
  const size_t n = re.size();
  if (i < n && re[i] == '^') ++i;
  size_t end = n;
  if (end > i && re[end - 1] == '$' && (end < 2 || re[end - 2] != '\\')) --end;
  auto escape_class = [](char c, ByteSet& s) -> bool {
    switch (c) {
      case 'd':
        s = digits();
        return true;
      case 'w':
        s = word();
        return true;
      case 's':
        s = ByteSet();
        s.add(' ');
        return true;
      case 'D':
        s = complement_printable(digits());
        return true;
      case 'W':
        s = complement_printable(word());
        return true;
      case 'S': {
        ByteSet sp;
        sp.add(' ');
        s = complement_printable(sp);
        return true;
      }
      default:
        break;
    }
    if (std::string_view(".-\\/^$|?*+()[]{}").find(c) != std::string_view::npos || c == ' ' ||
        c == '#' || c == ',' || c == ':' || c == '=' || c == '!' || c == '<' || c == '>' ||
        c == '@' || c == '%' || c == '&' || c == '~' || c == '\'' || c == '"' || c == '_') {
      s = ByteSet();
      s.add(static_cast<uint8_t>(c));
      return true;
    }
    return false;
  };
  while (i < end) {
    const char c = re[i];
    ByteSet cls;
    if (c == '(' || c == ')' || c == '|')
      return "groups and alternation ('(', ')', '|') are not supported";
    if (c == '*' || c == '+' || c == '?' || c == '{')
      return fmt::format("'{}' at offset {} has nothing to repeat", c, i);
    if (c == '^' || c == '$') return "'^' and '$' are supported only at the ends";
    if (c == '.') {
      cls = printable();
      ++i;
    } else if (c == '\\') {
      if (i + 1 >= end) return "the pattern ends with a backslash";
      if (!escape_class(re[i + 1], cls))
        return fmt::format("the escape '\\{}' is not supported", re[i + 1]);
      i += 2;
    } else if (c == '[') {
      ++i;
      bool negate = false;
      if (i < end && re[i] == '^') negate = true, ++i;
      ByteSet set;
      bool first = true;
      while (i < end && (re[i] != ']' || first)) {
        first = false;
        ByteSet item;
        int lo = -1;
        if (re[i] == '\\') {
          if (i + 1 >= end) return "unterminated character class";
          if (!escape_class(re[i + 1], item))
            return fmt::format("the escape '\\{}' is not supported", re[i + 1]);
          int count = 0, only = -1;
          for (int b = 0; b < 256; ++b)
            if (item.has(static_cast<uint8_t>(b))) ++count, only = b;
          if (count == 1) lo = only;
          i += 2;
        } else {
          if (static_cast<unsigned char>(re[i]) >= 0x80)
            return "non-ASCII characters are not supported";
          lo = static_cast<unsigned char>(re[i]);
          item.add(static_cast<uint8_t>(lo));
          ++i;
        }
        if (lo >= 0 && i + 1 < end && re[i] == '-' && re[i + 1] != ']') {
          int hi = static_cast<unsigned char>(re[i + 1]);
          size_t adv = 2;
          if (re[i + 1] == '\\') {
            if (i + 2 >= end) return "unterminated character class";
            hi = static_cast<unsigned char>(re[i + 2]);
            adv = 3;
          }
          if (hi < lo || hi >= 0x80) return "a bad range in a character class";
          item.add_range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
          i += adv;
        }
        set.add(item);
      }
      if (i >= end) return "unterminated character class";
      ++i;  // ']'
      cls = negate ? complement_printable(set) : intersect(set, printable());
    } else {
      if (static_cast<unsigned char>(c) >= 0x80) return "non-ASCII characters are not supported";
      cls.add(static_cast<uint8_t>(c));
      ++i;
    }
    cls = intersect(cls, printable());
    if (cls.empty())
      return "a character it needs is one generation does not produce (a quote, a backslash, a "
             "control or non-ASCII "
             "character)";
    // Quantifier
    int lo = 1, hi = 1;  // hi -1: unbounded
    if (i < end && (re[i] == '*' || re[i] == '+' || re[i] == '?')) {
      lo = re[i] == '+' ? 1 : 0;
      hi = re[i] == '?' ? 1 : -1;
      ++i;
    } else if (i < end && re[i] == '{') {
      const size_t close = re.find('}', i);
      if (close == std::string_view::npos || close >= end) return "an unterminated '{' quantifier";
      const std::string body(re.substr(i + 1, close - i - 1));
      const size_t comma = body.find(',');
      auto num = [](const std::string& s, int& v) {
        if (s.empty() || s.size() > 4 || s.find_first_not_of("0123456789") != std::string::npos)
          return false;
        v = std::stoi(s);
        return true;
      };
      if (comma == std::string::npos) {
        if (!num(body, lo)) return fmt::format("the quantifier '{{{}}}' is not supported", body);
        hi = lo;
      } else {
        if (!num(body.substr(0, comma), lo))
          return fmt::format("the quantifier '{{{}}}' is not supported", body);
        if (comma + 1 == body.size())
          hi = -1;
        else if (!num(body.substr(comma + 1), hi) || hi < lo)
          return fmt::format("the quantifier '{{{}}}' is not supported", body);
      }
      i = close + 1;
    }
    if (i < end && re[i] == '?') ++i;  // lazy: the same strings
    if (i < end && re[i] == '+') return "possessive quantifiers are not supported";
    for (int k = 0; k < lo; ++k) out.steps.push_back({cls, Rep::One});
    if (hi < 0)
      out.steps.push_back({cls, Rep::Star});
    else
      for (int k = lo; k < hi; ++k) out.steps.push_back({cls, Rep::Optional});
    if (out.steps.size() > static_cast<size_t>(Pattern::kMaxSteps))
      return fmt::format(
          "the pattern is too long: at most {} character positions once repetitions are expanded",
          Pattern::kMaxSteps);
  }
  return "";
}

// Formats as patterns whose every match is a valid value (a subset: months
// 01-09 and days 01-19 are always valid dates, say).
const char* format_pattern(std::string_view f) {
  if (f == "date") return "[12][0-9]{3}-0[1-9]-[01][1-9]";
  if (f == "time") return "[01][0-9]:[0-5][0-9]:[0-5][0-9]Z";
  if (f == "date-time") return "[12][0-9]{3}-0[1-9]-[01][1-9]T[01][0-9]:[0-5][0-9]:[0-5][0-9]Z";
  if (f == "uuid") return "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
  if (f == "email") return "[a-z0-9]{1,12}@[a-z0-9]{1,12}\\.[a-z]{2,4}";
  if (f == "ipv4") return "[1-9][0-9]?\\.[1-9][0-9]?\\.[1-9][0-9]?\\.[1-9][0-9]?";
  return nullptr;
}

std::string dump(const ojson& v) {
  return v.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

bool matches_type(const ojson& v, std::string_view t) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "string") return v.is_string();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "number") return v.is_number();
  if (t == "integer") {
    if (v.is_number_integer()) return true;
    if (v.is_number_float()) {
      const double d = v.get<double>();
      return std::isfinite(d) && std::floor(d) == d;
    }
  }
  return false;
}

class Compiler {
 public:
  explicit Compiler(const ojson& doc) : doc_(doc) {}

  CompiledSchema run() {
    const int root = compile(doc_, "", 0);
    CompiledSchema r;
    if (root < 0) {
      r.path = err_path_;
      r.message = err_;
      return r;
    }
    out_.root = root;
    if (Status st = out_.finish(); !st.ok()) {
      r.message = st.message();
      return r;
    }
    r.schema = std::make_shared<const Schema>(std::move(out_));
    return r;
  }

 private:
  int fail(const std::string& path, std::string msg) {
    if (err_.empty()) {
      err_path_ = path;
      err_ = std::move(msg);
    }
    return -1;
  }

  int add(Node n, const std::string& path) {
    if (out_.nodes.size() >= static_cast<size_t>(Schema::kMaxNodes))
      return fail(path,
                  fmt::format("the schema is too large (more than {} parts)", Schema::kMaxNodes));
    return out_.add(std::move(n));
  }

  // The bytes a compiled node's values may start with.
  ByteSet first_of(int idx, int guard = 0) {
    const Node& n = out_.nodes[static_cast<size_t>(idx)];
    ByteSet s;
    switch (n.kind) {
      case Kind::Object:
        s.add('{');
        break;
      case Kind::Array:
        s.add('[');
        break;
      case Kind::String:
        s.add('"');
        break;
      case Kind::Integer:
      case Kind::Number:
        for (const char* c = "-0123456789"; *c; ++c)
          if (constrain::number_completion(n, std::string_view(c, 1)) >= 0)
            s.add(static_cast<uint8_t>(*c));
        break;
      case Kind::Literal:
        for (const std::string& l : n.literals)
          if (!l.empty()) s.add(static_cast<uint8_t>(l[0]));
        break;
      case Kind::Choice:
        if (guard < 64)
          for (int a : n.alts) s.add(first_of(a, guard + 1));
        break;
    }
    return s;
  }

  // One Choice over `alts`, whose first bytes must not overlap.
  int choice(std::vector<int> alts, const std::string& path, std::string_view keyword) {
    if (alts.size() == 1) return alts[0];
    ByteSet all;
    for (int a : alts) {
      const ByteSet f = first_of(a);
      for (int b = 0; b < 256; ++b)
        if (all.has(static_cast<uint8_t>(b)) && f.has(static_cast<uint8_t>(b)))
          return fail(
              path,
              fmt::format(
                  "'{}': alternatives whose values can start with the same character ('{}') are "
                  "not supported (they must differ in type, or in their first character)",
                  keyword, static_cast<char>(b)));
      all.add(f);
    }
    Node c;
    c.kind = Kind::Choice;
    c.alts = std::move(alts);
    return add(std::move(c), path);
  }

  const ojson* resolve(const std::string& ref) {
    if (ref.empty() || ref[0] != '#') return nullptr;
    try {
      const ojson::json_pointer ptr(ref.substr(1));
      if (!doc_.contains(ptr)) return nullptr;
      return &doc_.at(ptr);
    } catch (const std::exception&) {
      return nullptr;
    }
  }

  int compile(const ojson& s, const std::string& path, int depth) {
    if (depth > 64) return fail(path, "the schema nests too deeply");
    if (s.is_boolean()) {
      if (s.get<bool>()) return out_.any();
      return fail(path, "the schema 'false' allows no value");
    }
    if (!s.is_object()) return fail(path, "a schema must be an object or a boolean");
    std::vector<std::string_view> keys;
    Family fam = Family::None;
    bool mixed = false;
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      if (annotations().count(k)) continue;
      if (!handled(k)) return fail(path, fmt::format("the keyword '{}' is not supported", k));
      keys.push_back(k);
      const Family f = family_of(k);
      if (f != Family::None && f != Family::Combinator) {
        if (fam != Family::None && fam != f) mixed = true;
        fam = f;
      }
    }
    auto has = [&](const char* k) { return s.contains(k); };

    // $ref, anyOf, oneOf stand alone.
    for (const char* k : {"$ref", "anyOf", "oneOf"}) {
      if (!has(k)) continue;
      if (keys.size() > 1)
        return fail(path, fmt::format("'{}' together with other keywords ('{}') is not supported",
                                      k, keys[0] == k ? keys[1] : keys[0]));
    }
    if (has("$ref")) {
      const ojson& r = s["$ref"];
      if (!r.is_string()) return fail(path + ".$ref", "'$ref' must be a string");
      const std::string ref = r.get<std::string>();
      if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
      if (active_.count(ref))
        return fail(path + ".$ref", fmt::format("a recursive '$ref' ('{}') is not supported", ref));
      const ojson* target = resolve(ref);
      if (!target)
        return fail(path + ".$ref", fmt::format("'$ref' '{}' does not name a part of this schema "
                                                "(only local '#/...' references are "
                                                "supported)",
                                                ref));
      active_.insert(ref);
      const int node = compile(*target, path + ".$ref", depth + 1);
      active_.erase(ref);
      if (node >= 0) refs_[ref] = node;
      return node;
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!has(k)) continue;
      const ojson& a = s[k];
      if (!a.is_array() || a.empty())
        return fail(path + "." + k, fmt::format("'{}' must be a non-empty array", k));
      std::vector<int> alts;
      for (size_t i = 0; i < a.size(); ++i) {
        const std::string p = fmt::format("{}.{}[{}]", path, k, i);
        if (std::string_view(k) == "oneOf") {
          // oneOf holds when exactly one alternative validates. A value made
          // from one alternative can validate another only if that one
          // accepts its type: with every type stated and the first
          // characters apart, none does, and oneOf is anyOf.
          const ojson* alt = &a[i];
          for (int hop = 0;
               hop < 8 && alt->is_object() && alt->contains("$ref") && (*alt)["$ref"].is_string();
               ++hop) {
            const ojson* t = resolve((*alt)["$ref"].get<std::string>());
            if (!t) break;
            alt = t;
          }
          if (!alt->is_object() ||
              !(alt->contains("type") || alt->contains("enum") || alt->contains("const")))
            return fail(p,
                        "'oneOf' is supported only when every alternative states its 'type' (or is "
                        "an 'enum' or "
                        "'const')");
        }
        const int node = compile(a[i], p, depth + 1);
        if (node < 0) return -1;
        alts.push_back(node);
      }
      return choice(std::move(alts), path, k);
    }

    if (has("enum") || has("const")) return literals(s, keys, path);

    std::vector<std::string> types;
    if (has("type")) {
      const ojson& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const ojson& e : t) {
          if (!e.is_string())
            return fail(path + ".type", "'type' must be a string or an array of strings");
          types.push_back(e.get<std::string>());
        }
      } else {
        return fail(path + ".type", "'type' must be a string or an array of strings");
      }
      for (const std::string& ty : types)
        if (ty != "object" && ty != "array" && ty != "string" && ty != "number" &&
            ty != "integer" && ty != "boolean" && ty != "null")
          return fail(path + ".type", fmt::format("unknown type '{}'", ty));
      // integer is a subset of number: generating numbers covers both.
      if (std::count(types.begin(), types.end(), "number") &&
          std::count(types.begin(), types.end(), "integer"))
        types.erase(std::remove(types.begin(), types.end(), "integer"), types.end());
      std::sort(types.begin(), types.end());
      types.erase(std::unique(types.begin(), types.end()), types.end());
    } else {
      if (mixed)
        return fail(path,
                    "keywords of several types without 'type' are not supported; state the 'type'");
      switch (fam) {
        case Family::Object:
          types = {"object"};
          break;
        case Family::Array:
          types = {"array"};
          break;
        case Family::String:
          types = {"string"};
          break;
        case Family::Number:
          types = {"number"};
          break;
        default:
          return out_.any();
      }
    }
    std::vector<int> alts;
    for (const std::string& ty : types) {
      const int node = typed(s, ty, path, depth);
      if (node < 0) return -1;
      alts.push_back(node);
    }
    return choice(std::move(alts), path, "type");
  }

  int literals(const ojson& s, const std::vector<std::string_view>& keys, const std::string& path) {
    for (std::string_view k : keys)
      if (k != "enum" && k != "const" && k != "type")
        return fail(path, fmt::format("'{}' together with 'enum' or 'const' is not supported", k));
    std::vector<const ojson*> vals;
    if (s.contains("enum")) {
      const ojson& e = s["enum"];
      if (!e.is_array() || e.empty())
        return fail(path + ".enum", "'enum' must be a non-empty array");
      if (e.size() > 1024) return fail(path + ".enum", "'enum' has more than 1024 values");
      for (const ojson& v : e) vals.push_back(&v);
    }
    if (s.contains("const")) {
      const ojson& c = s["const"];
      if (s.contains("enum")) {
        std::vector<const ojson*> both;
        for (const ojson* v : vals)
          if (*v == c) both.push_back(v);
        vals = both;
      } else {
        vals.push_back(&c);
      }
    }
    if (s.contains("type")) {
      std::vector<std::string> types;
      const ojson& t = s["type"];
      if (t.is_string())
        types.push_back(t.get<std::string>());
      else if (t.is_array())
        for (const ojson& e : t)
          if (e.is_string()) types.push_back(e.get<std::string>());
      std::vector<const ojson*> kept;
      for (const ojson* v : vals)
        for (const std::string& ty : types)
          if (matches_type(*v, ty)) {
            kept.push_back(v);
            break;
          }
      vals = kept;
    }
    if (vals.empty()) return fail(path, "no value satisfies 'enum', 'const' and 'type' together");
    Node n;
    n.kind = Kind::Literal;
    for (const ojson* v : vals) n.literals.push_back(dump(*v));
    return add(std::move(n), path);
  }

  bool read_count(const ojson& s, const char* k, const std::string& path, int& out) {
    if (!s.contains(k)) return true;
    const ojson& v = s[k];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      fail(path + "." + k, fmt::format("'{}' must be a non-negative integer", k));
      return false;
    }
    out = static_cast<int>(std::min<int64_t>(v.get<int64_t>(), constrain::kUnbounded));
    return true;
  }

  int typed(const ojson& s, const std::string& ty, const std::string& path, int depth) {
    Node n;
    if (ty == "null" || ty == "boolean") {
      n.kind = Kind::Literal;
      n.literals = ty == "null" ? std::vector<std::string>{"null"}
                                : std::vector<std::string>{"true", "false"};
      return add(std::move(n), path);
    }
    if (ty == "object") return object(s, path, depth);
    if (ty == "array") {
      n.kind = Kind::Array;
      if (!read_count(s, "minItems", path, n.min_items) ||
          !read_count(s, "maxItems", path, n.max_items))
        return -1;
      if (n.min_items > n.max_items)
        return fail(path + ".minItems", "'minItems' is larger than 'maxItems'");
      if (s.contains("uniqueItems")) {
        const ojson& u = s["uniqueItems"];
        if (!u.is_boolean()) return fail(path + ".uniqueItems", "'uniqueItems' must be a boolean");
        if (u.get<bool>())
          return fail(path + ".uniqueItems", "'uniqueItems': true is not supported");
      }
      if (s.contains("items")) {
        const ojson& it = s["items"];
        if (it.is_array())
          return fail(path + ".items", "'items' as an array (tuples) is not supported");
        if (it.is_boolean() && !it.get<bool>()) {
          n.max_items = 0;
          if (n.min_items > 0)
            return fail(path + ".items", "'items': false with 'minItems' allows no value");
          n.items = out_.any();
        } else {
          n.items = compile(it, path + ".items", depth + 1);
          if (n.items < 0) return -1;
        }
      } else {
        n.items = out_.any();
      }
      return add(std::move(n), path);
    }
    if (ty == "string") {
      n.kind = Kind::String;
      if (!read_count(s, "minLength", path, n.min_len) ||
          !read_count(s, "maxLength", path, n.max_len))
        return -1;
      if (n.min_len > n.max_len)
        return fail(path + ".minLength", "'minLength' is larger than 'maxLength'");
      const bool pat = s.contains("pattern"), fmt_ = s.contains("format");
      if (pat && fmt_)
        return fail(path + ".pattern", "'pattern' together with 'format' is not supported");
      std::string re;
      std::string where;
      if (pat) {
        if (!s["pattern"].is_string()) return fail(path + ".pattern", "'pattern' must be a string");
        re = s["pattern"].get<std::string>();
        where = "pattern";
      } else if (fmt_) {
        if (!s["format"].is_string()) return fail(path + ".format", "'format' must be a string");
        const std::string f = s["format"].get<std::string>();
        const char* p = format_pattern(f);
        if (!p)
          return fail(path + ".format",
                      fmt::format("'format' '{}' is not supported (date, time, date-time, uuid, "
                                  "email and ipv4 are)",
                                  f));
        re = p;
        where = "format";
      }
      if (!where.empty()) {
        Pattern p;
        if (std::string e = compile_pattern(re, p); !e.empty())
          return fail(path + "." + where, fmt::format("'{}' is not supported: {}", where, e));
        p.finish();
        if (p.min_rest[0] > n.max_len || p.max_rest[0] < n.min_len)
          return fail(
              path + "." + where,
              fmt::format("no string matches '{}' within 'minLength' and 'maxLength'", where));
        out_.patterns.push_back(std::move(p));
        n.pattern = static_cast<int>(out_.patterns.size()) - 1;
      }
      return add(std::move(n), path);
    }
    // number / integer
    n.kind = ty == "integer" ? Kind::Integer : Kind::Number;
    auto num = [&](const char* k, double& v) -> bool {
      const ojson& x = s[k];
      if (!x.is_number()) {
        fail(path + "." + k, fmt::format("'{}' must be a number", k));
        return false;
      }
      v = x.get<double>();
      return true;
    };
    double v = 0;
    bool draft4_lo = false, draft4_hi = false;
    for (const char* k : {"exclusiveMinimum", "exclusiveMaximum"}) {
      if (s.contains(k) && s[k].is_boolean()) {  // draft 4: a flag on minimum / maximum
        (std::string_view(k) == "exclusiveMinimum" ? draft4_lo : draft4_hi) = s[k].get<bool>();
      }
    }
    auto tighten_lo = [&](double x, bool excl) {
      if (!n.has_lo || x > n.lo || (x == n.lo && excl)) n.lo = x, n.lo_excl = excl;
      n.has_lo = true;
    };
    auto tighten_hi = [&](double x, bool excl) {
      if (!n.has_hi || x < n.hi || (x == n.hi && excl)) n.hi = x, n.hi_excl = excl;
      n.has_hi = true;
    };
    if (s.contains("minimum")) {
      if (!num("minimum", v)) return -1;
      tighten_lo(v, draft4_lo);
    }
    if (s.contains("maximum")) {
      if (!num("maximum", v)) return -1;
      tighten_hi(v, draft4_hi);
    }
    if (s.contains("exclusiveMinimum") && !s["exclusiveMinimum"].is_boolean()) {
      if (!num("exclusiveMinimum", v)) return -1;
      tighten_lo(v, true);
    }
    if (s.contains("exclusiveMaximum") && !s["exclusiveMaximum"].is_boolean()) {
      if (!num("exclusiveMaximum", v)) return -1;
      tighten_hi(v, true);
    }
    if ((draft4_lo && !s.contains("minimum")) || (draft4_hi && !s.contains("maximum")))
      return fail(path,
                  "a boolean 'exclusiveMinimum' / 'exclusiveMaximum' needs 'minimum' / 'maximum'");
    if (constrain::number_completion(n, "") < 0)
      return fail(path, fmt::format("no {} of at most 15 digits satisfies the bounds", ty));
    return add(std::move(n), path);
  }

  int object(const ojson& s, const std::string& path, int depth) {
    Node n;
    n.kind = Kind::Object;
    std::vector<std::string> required;
    if (s.contains("required")) {
      const ojson& r = s["required"];
      if (!r.is_array()) return fail(path + ".required", "'required' must be an array of strings");
      for (const ojson& e : r) {
        if (!e.is_string())
          return fail(path + ".required", "'required' must be an array of strings");
        required.push_back(e.get<std::string>());
      }
    }
    bool extra_allowed = true;
    const ojson* extra = nullptr;
    if (s.contains("additionalProperties")) {
      const ojson& a = s["additionalProperties"];
      if (a.is_boolean())
        extra_allowed = a.get<bool>();
      else if (a.is_object())
        extra = &a;
      else
        return fail(path + ".additionalProperties",
                    "'additionalProperties' must be a boolean or a schema");
    }
    std::set<std::string> declared;
    if (s.contains("properties")) {
      const ojson& p = s["properties"];
      if (!p.is_object()) return fail(path + ".properties", "'properties' must be an object");
      if (p.size() > 256)
        return fail(path + ".properties", "more than 256 properties are not supported");
      for (auto it = p.begin(); it != p.end(); ++it) {
        constrain::Property prop;
        prop.key = dump(ojson(it.key()));
        prop.node = compile(it.value(), path + ".properties." + it.key(), depth + 1);
        if (prop.node < 0) return -1;
        prop.required = std::find(required.begin(), required.end(), it.key()) != required.end();
        declared.insert(it.key());
        n.props.push_back(std::move(prop));
      }
    }
    // Required but not declared: written as an additional property.
    for (const std::string& r : required) {
      if (declared.count(r)) continue;
      if (!extra_allowed)
        return fail(path + ".required",
                    fmt::format("required property '{}' is not in 'properties' and "
                                "'additionalProperties' is false",
                                r));
      constrain::Property prop;
      prop.key = dump(ojson(r));
      prop.node = extra ? compile(*extra, path + ".additionalProperties", depth + 1) : out_.any();
      if (prop.node < 0) return -1;
      prop.required = true;
      declared.insert(r);
      n.props.push_back(std::move(prop));
    }
    if (n.props.empty() && extra_allowed) {
      // No properties named: any keys, values as additionalProperties says.
      n.free_keys = true;
      n.extra = extra ? compile(*extra, path + ".additionalProperties", depth + 1) : out_.any();
      if (n.extra < 0) return -1;
    }
    return add(std::move(n), path);
  }

  const ojson& doc_;
  Schema out_;
  std::map<std::string, int> refs_;
  std::set<std::string> active_;
  std::string err_, err_path_;
};

}  // namespace

CompiledSchema compile_json_schema(const ojson& schema) {
  try {
    return Compiler(schema).run();
  } catch (const std::exception& e) {
    CompiledSchema r;
    r.message = fmt::format("the schema could not be read: {}", e.what());
    return r;
  }
}

std::shared_ptr<const constrain::Schema> json_object_schema() {
  static const std::shared_ptr<const constrain::Schema> s = [] {
    const ojson doc = ojson::parse(R"({"type":"object"})");
    return Compiler(doc).run().schema;
  }();
  return s;
}

}  // namespace edgelm::serve
