#include "core/utf8.h"
#include "template/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "template/pystr.h"

namespace edgelm::jinja {

namespace {

class JsonReader {
 public:
  explicit JsonReader(std::string_view s) : s_(s) {}

  Result<Value> document() {
    EDGELM_ASSIGN(Value v, value(0));
    ws();
    if (p_ != s_.size()) return fail("unexpected text after the value");
    return v;
  }

 private:
  Error fail(std::string_view what) const { return make_error("JSON: {} at offset {}", what, p_); }

  void ws() {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\t' || s_[p_] == '\n' || s_[p_] == '\r')) ++p_;
  }

  bool lit(std::string_view w) {
    if (s_.substr(p_, w.size()) != w) return false;
    p_ += w.size();
    return true;
  }

  Result<Value> value(int depth) {
    if (depth > kMaxJsonDepth) return fail("nesting too deep");
    ws();
    if (p_ >= s_.size()) return fail("unexpected end");
    const char c = s_[p_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') {
      EDGELM_ASSIGN(std::string str, string());
      return Value::string(std::move(str));
    }
    if (lit("true")) return Value::boolean(true);
    if (lit("false")) return Value::boolean(false);
    if (lit("null")) return Value::none();
    // Python's json.loads also takes these.
    if (lit("NaN")) return Value::real(NAN);
    if (lit("Infinity")) return Value::real(INFINITY);
    if (lit("-Infinity")) return Value::real(-INFINITY);
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    return fail("unexpected character");
  }

  Result<Value> number() {
    const size_t b = p_;
    if (s_[p_] == '-') ++p_;
    if (p_ >= s_.size() || !(s_[p_] >= '0' && s_[p_] <= '9')) return fail("bad number");
    if (s_[p_] == '0') ++p_;
    else
      while (p_ < s_.size() && s_[p_] >= '0' && s_[p_] <= '9') ++p_;
    bool is_float = false;
    if (p_ < s_.size() && s_[p_] == '.') {
      is_float = true;
      ++p_;
      if (p_ >= s_.size() || !(s_[p_] >= '0' && s_[p_] <= '9')) return fail("bad number");
      while (p_ < s_.size() && s_[p_] >= '0' && s_[p_] <= '9') ++p_;
    }
    if (p_ < s_.size() && (s_[p_] == 'e' || s_[p_] == 'E')) {
      is_float = true;
      ++p_;
      if (p_ < s_.size() && (s_[p_] == '+' || s_[p_] == '-')) ++p_;
      if (p_ >= s_.size() || !(s_[p_] >= '0' && s_[p_] <= '9')) return fail("bad number");
      while (p_ < s_.size() && s_[p_] >= '0' && s_[p_] <= '9') ++p_;
    }
    const std::string text(s_.substr(b, p_ - b));
    if (!is_float) {
      int64_t i = 0;
      auto r = std::from_chars(text.data(), text.data() + text.size(), i);
      if (r.ec == std::errc() && r.ptr == text.data() + text.size()) return Value::integer(i);
      // Wider than int64 (Python keeps it exact): the nearest double.
    }
    return Value::real(std::strtod(text.c_str(), nullptr));
  }

  Result<uint32_t> hex4() {
    if (p_ + 4 > s_.size()) return fail("bad \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[p_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else return fail("bad \\u escape");
    }
    return v;
  }

  Result<std::string> string() {
    ++p_;  // "
    std::string out;
    while (true) {
      if (p_ >= s_.size()) return fail("unterminated string");
      const char c = s_[p_];
      if (c == '"') {
        ++p_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) return fail("control character in string");
      if (c != '\\') {
        out.push_back(c);
        ++p_;
        continue;
      }
      ++p_;
      if (p_ >= s_.size()) return fail("unterminated string");
      const char e = s_[p_++];
      switch (e) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          EDGELM_ASSIGN(uint32_t cp, hex4());
          if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(p_, 2) == "\\u") {
            const size_t save = p_;
            p_ += 2;
            EDGELM_ASSIGN(uint32_t lo, hex4());
            if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            else p_ = save;
          }
          // A lone surrogate cannot be UTF-8: U+FFFD stands in for it.
          if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;
          utf8_append(out, cp, /*keep_surrogates=*/true);
          break;
        }
        default: return fail("bad escape");
      }
    }
  }

  Result<Value> array(int depth) {
    ++p_;
    std::vector<Value> items;
    ws();
    if (p_ < s_.size() && s_[p_] == ']') {
      ++p_;
      return Value::list(std::move(items));
    }
    while (true) {
      EDGELM_ASSIGN(Value v, value(depth + 1));
      items.push_back(std::move(v));
      ws();
      if (p_ >= s_.size()) return fail("unterminated array");
      if (s_[p_] == ',') {
        ++p_;
        continue;
      }
      if (s_[p_] == ']') {
        ++p_;
        return Value::list(std::move(items));
      }
      return fail("expected ',' or ']'");
    }
  }

  Result<Value> object(int depth) {
    ++p_;
    Value d = Value::dict();
    ws();
    if (p_ < s_.size() && s_[p_] == '}') {
      ++p_;
      return d;
    }
    while (true) {
      ws();
      if (p_ >= s_.size() || s_[p_] != '"') return fail("expected a string key");
      EDGELM_ASSIGN(std::string key, string());
      ws();
      if (p_ >= s_.size() || s_[p_] != ':') return fail("expected ':'");
      ++p_;
      EDGELM_ASSIGN(Value v, value(depth + 1));
      d.set(key, std::move(v));
      ws();
      if (p_ >= s_.size()) return fail("unterminated object");
      if (s_[p_] == ',') {
        ++p_;
        continue;
      }
      if (s_[p_] == '}') {
        ++p_;
        return d;
      }
      return fail("expected ',' or '}'");
    }
  }

  std::string_view s_;
  size_t p_ = 0;
};

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  static const char* hex = "0123456789abcdef";
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80 && ensure_ascii) {
      const size_t n = pystr::cp_size(s, i);
      uint32_t cp = pystr::decode_at(s, i);
      i += n;
      auto u4 = [&](uint32_t u) {
        out += "\\u";
        for (int k = 12; k >= 0; k -= 4) out.push_back(hex[(u >> k) & 15]);
      };
      if (cp >= 0x10000) {
        cp -= 0x10000;
        u4(0xD800 + (cp >> 10));
        u4(0xDC00 + (cp & 0x3FF));
      } else {
        u4(cp);
      }
      continue;
    }
    ++i;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out.push_back(hex[c >> 4]);
          out.push_back(hex[c & 15]);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonDumpOptions& o) : o_(o) {
    item_sep_ = o.item_separator ? *o.item_separator : (o.indent ? "," : ", ");
    key_sep_ = o.key_separator ? *o.key_separator : ": ";
  }

  Status write(std::string& out, const Value& v, int depth) {
    if (depth > kMaxJsonDepth) return make_error("tojson: nesting too deep (a cycle?)");
    switch (v.kind()) {
      case Value::Kind::kNone: out += "null"; return {};
      case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return {};
      case Value::Kind::kInt: out += std::to_string(v.as_int()); return {};
      case Value::Kind::kFloat: out += float_json(v.as_double()); return {};
      case Value::Kind::kString: append_json_string(out, v.str(), o_.ensure_ascii); return {};
      case Value::Kind::kList: {
        if (!v.indexable()) break;
        const auto& items = v.items();
        if (items.empty()) {
          out += "[]";
          return {};
        }
        out += '[';
        newline(out, depth + 1);
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) {
            out += item_sep_;
            newline(out, depth + 1);
          }
          EDGELM_TRY(write(out, items[i], depth + 1));
        }
        newline(out, depth);
        out += ']';
        return {};
      }
      case Value::Kind::kDict: {
        const auto& d = v.dict_data();
        if (d.items.empty()) {
          out += "{}";
          return {};
        }
        std::vector<const std::pair<Value, Value>*> order;
        for (const auto& kv : d.items) order.push_back(&kv);
        if (o_.sort_keys) EDGELM_TRY(sort(order));
        out += '{';
        newline(out, depth + 1);
        bool first = true;
        for (const auto* kv : order) {
          if (!first) {
            out += item_sep_;
            newline(out, depth + 1);
          }
          first = false;
          EDGELM_TRY(write_key(out, kv->first));
          out += key_sep_;
          EDGELM_TRY(write(out, kv->second, depth + 1));
        }
        newline(out, depth);
        out += '}';
        return {};
      }
      default: break;
    }
    return make_error("Object of type {} is not JSON serializable", type_name(v));
  }

 private:
  static std::string float_json(double d) {
    if (std::isnan(d)) return "NaN";
    if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
    return float_repr(d);
  }

  void newline(std::string& out, int depth) const {
    if (!o_.indent) return;
    out.push_back('\n');
    for (int i = 0; i < depth; ++i) out += *o_.indent;
  }

  Status write_key(std::string& out, const Value& k) {
    switch (k.kind()) {
      case Value::Kind::kString: append_json_string(out, k.str(), o_.ensure_ascii); return {};
      case Value::Kind::kNone: out += "\"null\""; return {};
      case Value::Kind::kBool: out += k.as_bool() ? "\"true\"" : "\"false\""; return {};
      case Value::Kind::kInt: out += fmt::format("\"{}\"", k.as_int()); return {};
      case Value::Kind::kFloat: out += fmt::format("\"{}\"", float_json(k.as_double())); return {};
      default: return make_error("keys must be str, int, float, bool or None, not {}", type_name(k));
    }
  }

  static Status sort(std::vector<const std::pair<Value, Value>*>& order) {
    // Python compares the keys themselves: all str, or all numbers.
    bool all_str = true, all_num = true;
    for (const auto* kv : order) {
      all_str &= kv->first.is_string();
      all_num &= kv->first.is_number();
    }
    if (all_str) {
      std::stable_sort(order.begin(), order.end(),
                       [](const auto* a, const auto* b) { return a->first.str() < b->first.str(); });
    } else if (all_num) {
      std::stable_sort(order.begin(), order.end(),
                       [](const auto* a, const auto* b) { return a->first.as_double() < b->first.as_double(); });
    } else {
      return make_error("'<' not supported between keys of different types");
    }
    return {};
  }

  const JsonDumpOptions& o_;
  std::string item_sep_, key_sep_;
};

}  // namespace

Result<Value> parse_json(std::string_view text) { return JsonReader(text).document(); }

Result<std::string> dump_json(const Value& v, const JsonDumpOptions& opt) {
  std::string out;
  JsonWriter w(opt);
  EDGELM_TRY(w.write(out, v, 0));
  return out;
}

}  // namespace edgelm::jinja
