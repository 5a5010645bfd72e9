// Request parsing for the OpenAI-compatible API (see openai.h): bodies in,
// validated GenerationRequests or ApiErrors out. Responses are rendered in
// openai_response.cpp.
#include "serve/openai.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstring>
#include <exception>
#include <optional>

#include <nlohmann/json.hpp>

#include "serve/json_schema.h"

namespace edgelm::serve {
namespace {

using json = nlohmann::json;           // requests: std::map objects, for key lookup

// Validation helpers return an error or nothing.
using Err = std::optional<ApiError>;

#define EDGELM_API_TRY(expr)        \
  do {                              \
    if (Err e_ = (expr)) return e_; \
  } while (0)

// ---------------------------------------------------------------------------
// Text helpers

// At most `n` bytes of `s`, cut at a character boundary, "..." marking a cut.
std::string shorten(std::string_view s, size_t n) {
  if (s.size() <= n) return std::string(s);
  size_t cut = n;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return std::string(s.substr(0, cut)) + "...";
}

// ---------------------------------------------------------------------------
// Errors

// "got ..." text for a value: numbers and booleans as they are, other values
// by their type (a string could be a megabyte long).
std::string describe(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return v.get<bool>() ? "true" : "false";
    case json::value_t::number_integer:
      return std::to_string(v.get<int64_t>());
    case json::value_t::number_unsigned:
      return std::to_string(v.get<uint64_t>());
    case json::value_t::number_float:
      return fmt::format("{}", v.get<double>());
    case json::value_t::string:
      return v.get_ref<const std::string&>().empty() ? "an empty string" : "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "an unsupported value";
  }
}

// "'path' must be <what>, got <value>": invalid_type when the JSON type is
// wrong, invalid_value when the type is right but the value is not.
ApiError must_be(const std::string& path, std::string_view what, const json& v, bool type_ok) {
  return invalid_request(fmt::format("'{}' must be {}, got {}", path, what, describe(v)), path,
                         type_ok ? "invalid_value" : "invalid_type");
}

ApiError unsupported(const std::string& path, std::string message) {
  return invalid_request(std::move(message), path, "unsupported_parameter");
}

ApiError not_json(std::string_view reason) {
  return invalid_request(fmt::format("request body is not valid JSON: {}", reason), "",
                         "invalid_json");
}

// ---------------------------------------------------------------------------
// Parsing the body

// Builds the document as nlohmann's own DOM parser does (its parser is a loop,
// not a recursion), but stops at once on nesting deeper than kMaxJsonDepth or
// on a duplicate key, and keeps the path of the value being read so that a
// lexer error (invalid UTF-8 in a string, say) can name the field.
class DomBuilder {
 public:
  explicit DomBuilder(json& root) : root_(root) {}

  bool null() { return put(json(nullptr)); }
  bool boolean(bool v) { return put(json(v)); }
  bool number_integer(json::number_integer_t v) { return put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return put(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t& /*text*/) { return put(json(v)); }
  bool string(json::string_t& v) { return put(json(std::move(v))); }
  bool binary(json::binary_t& /*v*/) { return false; }  // the JSON lexer never produces one
  bool start_object(std::size_t /*n*/) { return open(json::object()); }
  bool start_array(std::size_t /*n*/) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(json::string_t& k) {
    Frame& f = stack_.back();
    f.key = std::move(k);
    f.in_value = true;
    if (f.node->contains(f.key)) {
      duplicate_ = true;
      path_ = path();
      return false;
    }
    return true;
  }

  bool parse_error(std::size_t byte, const std::string& last_token, const json::exception& ex) {
    failed_ = true;
    byte_ = byte;
    path_ = path();
    what_ = ex.what();
    // nlohmann's message quotes the token read so far, which can be a whole
    // megabyte-long string: keep the quote only when it is short.
    const std::string quote = "; last read: '" + last_token + "'";
    if (last_token.size() > 32) {
      if (size_t at = what_.find(quote); at != std::string::npos) what_.erase(at, quote.size());
    }
    return false;
  }

  bool too_deep() const { return too_deep_; }
  bool duplicate() const { return duplicate_; }
  bool failed() const { return failed_; }
  size_t byte() const { return byte_; }
  const std::string& where() const { return path_; }
  const std::string& what() const { return what_; }

 private:
  struct Frame {
    json* node;             // an object or array under construction
    std::string key = {};   // object: the latest key
    bool in_value = false;  // object: that key's value is being read
    bool in_child = false;  // the last member is an open object or array
  };

  bool put(json&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return true;
    }
    Frame& f = stack_.back();
    if (f.node->is_array()) {
      f.node->push_back(std::move(v));
    } else {
      (*f.node)[f.key] = std::move(v);
      f.in_value = false;
    }
    return true;
  }

  bool open(json&& v) {
    if (stack_.size() >= static_cast<size_t>(kMaxJsonDepth)) {
      too_deep_ = true;
      return false;
    }
    json* node;
    if (stack_.empty()) {
      root_ = std::move(v);
      node = &root_;
    } else {
      // The parent only grows after this child closes, so `node` stays valid.
      Frame& f = stack_.back();
      if (f.node->is_array()) {
        f.node->push_back(std::move(v));
        node = &f.node->back();
      } else {
        node = &((*f.node)[f.key] = std::move(v));
      }
      f.in_child = true;
    }
    stack_.push_back(Frame{node});
    return true;
  }

  bool close() {
    stack_.pop_back();
    if (!stack_.empty()) {
      stack_.back().in_child = false;
      stack_.back().in_value = false;
    }
    return true;
  }

  // "messages[1].content": where the value being read sits.
  std::string path() const {
    std::string p;
    for (const Frame& f : stack_) {
      if (f.node->is_array()) {
        size_t i = f.node->size();
        if (f.in_child && i > 0) --i;
        p += fmt::format("[{}]", i);
      } else if (f.in_value || f.in_child) {
        if (!p.empty()) p += '.';
        p += shorten(f.key, 64);
      } else {
        break;  // between members (reading a key): the object itself
      }
    }
    return shorten(p, 256);
  }

  json& root_;
  std::vector<Frame> stack_;
  bool too_deep_ = false;
  bool duplicate_ = false;
  bool failed_ = false;
  size_t byte_ = 0;
  std::string path_;
  std::string what_;
};

// A failed read's structural refusals, for a document named `subject`
// ("request body", or a field's path in quotes): nesting past kMaxJsonDepth
// or a key given twice. The param is `param`, or for a duplicate in the
// body (param empty) the key's own path. Nothing for other failures.
Err structure_error(const DomBuilder& b, std::string_view subject, const std::string& param) {
  if (b.too_deep()) {
    return invalid_request(
        fmt::format("{} nests arrays and objects deeper than {} levels", subject, kMaxJsonDepth),
        param, "nesting_too_deep");
  }
  if (b.duplicate()) {
    return invalid_request(fmt::format("{} has the key '{}' twice", subject, b.where()),
                           param.empty() ? b.where() : param, "duplicate_key");
  }
  return std::nullopt;
}

// The body as a JSON object, or a 400 saying why not.
Err parse_body(std::string_view body, json& root) {
  // nlohmann skips a byte order mark; RFC 8259 forbids sending one, and
  // Python-based servers (OpenAI's own) refuse it, so refuse it too.
  if (body.starts_with("\xEF\xBB\xBF"))
    return not_json("it starts with a byte order mark (U+FEFF)");
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos)
    return not_json("the body is empty");

  DomBuilder b(root);
  if (!json::sax_parse(body.data(), body.data() + body.size(), &b)) {
    if (Err e = structure_error(b, "request body", "")) return e;
    if (b.failed() && b.what().find("ill-formed UTF-8") != std::string::npos) {
      if (b.where().empty()) {
        return invalid_request(fmt::format("request body is not valid UTF-8 (byte {})", b.byte()),
                               "", "invalid_encoding");
      }
      return invalid_request(fmt::format("'{}' is not valid UTF-8", b.where()), b.where(),
                             "invalid_encoding");
    }
    // nlohmann refuses numbers beyond a double (1e400) in its lexer.
    if (b.failed() && !b.where().empty() && b.what().find("number overflow") != std::string::npos) {
      return invalid_request(fmt::format("'{}' is a number too large to represent", b.where()),
                             b.where());
    }
    // "[json.exception.parse_error.101] parse error at line 1, column 9: syntax error ..."
    std::string reason = b.failed() ? b.what() : std::string("parse stopped");
    if (size_t at = reason.find("] "); at != std::string::npos) reason.erase(0, at + 2);
    if (!b.where().empty()) reason += fmt::format(" (in '{}')", b.where());
    ApiError e = not_json(shorten(reason, 240));
    e.param = b.where();  // "1e400" overflows in the lexer: still say which field
    return e;
  }
  if (!root.is_object()) {
    return invalid_request(
        fmt::format("request body must be a JSON object, got {}", describe(root)), "",
        "invalid_type");
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// Field readers. Each reads one optional field of `obj`; absent and null are
// the same (clients send null for "not given").

const json* field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// An integer-valued number (3, 3.0 and 3e0 alike, not 3.5), saturated to int64.
std::optional<int64_t> integer_of(const json& v) {
  switch (v.type()) {
    case json::value_t::number_integer:
      return v.get<int64_t>();
    case json::value_t::number_unsigned: {
      const uint64_t u = v.get<uint64_t>();
      return u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u);
    }
    case json::value_t::number_float: {
      const double d = v.get<double>();
      if (!std::isfinite(d) || d != std::trunc(d)) return std::nullopt;
      if (d >= 0x1p63) return INT64_MAX;
      if (d < -0x1p63) return INT64_MIN;
      return static_cast<int64_t>(d);
    }
    default:
      return std::nullopt;
  }
}

// A number in [lo, hi] (or (lo, hi] when lo_open); `what` describes the range.
Err read_float(const json& obj, const char* key, double lo, bool lo_open, double hi,
               std::string_view range, float& out) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  const std::string what = fmt::format("a number {}", range);
  if (!v->is_number()) return must_be(key, what, *v, false);
  const double d = v->get<double>();
  // The value is kept as a float: one above an open bound by less than a
  // float can tell (top_p 1e-300) is as far out as the bound itself.
  const auto f = static_cast<float>(d);
  if (!std::isfinite(d) || d < lo || d > hi || (lo_open && f <= lo))
    return must_be(key, what, *v, true);
  out = f;
  return std::nullopt;
}

// An integer in [lo, hi]; `what` describes it ("an integer of at least 1").
Err read_int(const json& v, const std::string& path, int64_t lo, int64_t hi, std::string_view what,
             int64_t& out) {
  if (!v.is_number()) return must_be(path, what, v, false);
  std::optional<int64_t> i = integer_of(v);
  if (!i || *i < lo || *i > hi) return must_be(path, what, v, true);
  out = *i;
  return std::nullopt;
}

Err read_bool(const json& obj, const char* key, const std::string& path, bool& out) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return must_be(path, "a boolean", *v, false);
  out = v->get<bool>();
  return std::nullopt;
}

Err read_string(const json& obj, const char* key, std::string& out) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) return must_be(key, "a string", *v, false);
  out = v->get<std::string>();
  return std::nullopt;
}

// max_tokens and max_completion_tokens (the newer name wins when both are given).
Err read_max_tokens(const json& body, GenerationRequest& req) {
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    const json* v = field(body, key);
    if (!v) continue;
    int64_t n = 0;
    EDGELM_API_TRY(read_int(*v, key, 1, INT64_MAX, "an integer of at least 1", n));
    req.max_tokens = static_cast<int>(std::min<int64_t>(n, INT_MAX));
  }
  return std::nullopt;
}

// Any int64 or uint64; negative seeds wrap (-1 is 2^64-1).
Err read_seed(const json& body, GenerationRequest& req) {
  const json* v = field(body, "seed");
  if (!v) return std::nullopt;
  constexpr std::string_view what = "an integer between -2^63 and 2^64-1";
  uint64_t seed = 0;
  switch (v->type()) {
    case json::value_t::number_integer:
      seed = static_cast<uint64_t>(v->get<int64_t>());
      break;
    case json::value_t::number_unsigned:
      seed = v->get<uint64_t>();
      break;
    case json::value_t::number_float: {
      const double d = v->get<double>();
      if (!std::isfinite(d) || d != std::trunc(d) || d < -0x1p63 || d >= 0x1p64) {
        return must_be("seed", what, *v, true);
      }
      seed = d < 0 ? static_cast<uint64_t>(static_cast<int64_t>(d)) : static_cast<uint64_t>(d);
      break;
    }
    default:
      return must_be("seed", what, *v, false);
  }
  req.sampling.seed = seed;
  req.seed_given = true;
  return std::nullopt;
}

Err read_stop(const json& body, GenerationRequest& req) {
  const json* v = field(body, "stop");
  if (!v) return std::nullopt;
  const std::string what =
      fmt::format("a string or an array of up to {} non-empty strings", kMaxStop);
  if (v->is_string()) {
    if (v->get_ref<const std::string&>().empty()) return must_be("stop", what, *v, true);
    req.stop.push_back(v->get<std::string>());
    return std::nullopt;
  }
  if (!v->is_array()) return must_be("stop", what, *v, false);
  if (v->size() > static_cast<size_t>(kMaxStop)) {
    return invalid_request(
        fmt::format("'stop' has {} strings; at most {} are allowed", v->size(), kMaxStop), "stop");
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const json& s = (*v)[i];
    const std::string path = fmt::format("stop[{}]", i);
    if (!s.is_string()) return must_be(path, "a non-empty string", s, false);
    if (s.get_ref<const std::string&>().empty())
      return must_be(path, "a non-empty string", s, true);
    req.stop.push_back(s.get<std::string>());
  }
  return std::nullopt;
}

// Fields both endpoints share.
Err read_common(const json& body, GenerationRequest& req) {
  SamplingParams& s = req.sampling;
  EDGELM_API_TRY(read_string(body, "model", req.model));
  EDGELM_API_TRY(read_max_tokens(body, req));
  EDGELM_API_TRY(read_float(body, "temperature", 0, false, 2, "between 0 and 2", s.temperature));
  EDGELM_API_TRY(read_float(body, "top_p", 0, true, 1, "greater than 0 and at most 1", s.top_p));
  EDGELM_API_TRY(read_float(body, "min_p", 0, false, 1, "between 0 and 1", s.min_p));
  EDGELM_API_TRY(
      read_float(body, "presence_penalty", -2, false, 2, "between -2 and 2", s.presence_penalty));
  EDGELM_API_TRY(
      read_float(body, "frequency_penalty", -2, false, 2, "between -2 and 2", s.frequency_penalty));
  // The sampler's own bound (SamplingParams::validate) is 10.
  EDGELM_API_TRY(read_float(body, "repeat_penalty", 0, true, 10, "greater than 0 and at most 10",
                            s.repeat_penalty));
  if (const json* v = field(body, "top_k")) {
    int64_t k = 0;
    EDGELM_API_TRY(read_int(*v, "top_k", 0, INT64_MAX, "an integer of at least 0", k));
    s.top_k = static_cast<int>(std::min<int64_t>(k, INT_MAX));  // beyond the vocabulary = off
  }
  EDGELM_API_TRY(read_seed(body, req));
  EDGELM_API_TRY(read_stop(body, req));
  EDGELM_API_TRY(read_bool(body, "stream", "stream", req.stream));
  if (const json* v = field(body, "stream_options")) {
    if (!v->is_object()) return must_be("stream_options", "an object", *v, false);
    EDGELM_API_TRY(
        read_bool(*v, "include_usage", "stream_options.include_usage", req.include_usage));
  }
  if (const json* v = field(body, "n")) {
    int64_t n = 0;
    EDGELM_API_TRY(read_int(*v, "n", INT64_MIN, INT64_MAX, "an integer", n));
    if (n != 1) {
      return invalid_request(
          fmt::format("'n' must be 1 (only n=1 is supported), got {}", describe(*v)), "n",
          "unsupported_value");
    }
  }
  std::string user;  // accepted for compatibility, not used
  EDGELM_API_TRY(read_string(body, "user", user));
  EDGELM_API_TRY(read_bool(body, "ignore_eos", "ignore_eos", req.ignore_eos));
  EDGELM_API_TRY(read_bool(body, "cache_prompt", "cache_prompt", req.cache_prompt));
  if (const json* v = field(body, "logit_bias"); v && !(v->is_object() && v->empty())) {
    return unsupported("logit_bias", "'logit_bias' is not supported");
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// Chat

// An optional string member `key` of `obj`, named "<path>.<key>" in errors.
Err read_string_at(const json& obj, const char* key, const std::string& path, std::string& out) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  const std::string p = path + "." + key;
  if (!v->is_string()) return must_be(p, "a string", *v, false);
  out = v->get<std::string>();
  return std::nullopt;
}

// OpenAI's rule for function names (dots allowed too, as some clients use them).
bool valid_function_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  return true;
}

constexpr std::string_view kNameRule = "a function name (1 to 64 of a-z, A-Z, 0-9, '_', '-', '.')";

// An assistant message's tool_calls: [{id, type: "function", function: {name, arguments}}].
// arguments is a JSON string of an object (OpenAI's form); an object is taken too.
Err read_tool_calls(const json& v, const std::string& path, std::vector<ToolCall>& out) {
  if (!v.is_array()) return must_be(path, "an array of tool calls", v, false);
  if (v.size() > static_cast<size_t>(kMaxTools))
    return invalid_request(fmt::format("'{}' has {} calls; at most {} are allowed", path, v.size(), kMaxTools), path);
  for (size_t i = 0; i < v.size(); ++i) {
    const json& c = v[i];
    const std::string p = fmt::format("{}[{}]", path, i);
    if (!c.is_object()) return must_be(p, "an object", c, false);
    ToolCall call;
    EDGELM_API_TRY(read_string_at(c, "id", p, call.id));
    if (const json* t = field(c, "type"); t && *t != "function")
      return must_be(p + ".type", "'function'", *t, t->is_string());
    const json* f = field(c, "function");
    if (!f)
      return invalid_request(fmt::format("'{}.function' is required", p), p + ".function", "missing_required_parameter");
    if (!f->is_object()) return must_be(p + ".function", "an object", *f, false);
    const json* name = field(*f, "name");
    if (!name)
      return invalid_request(fmt::format("'{}.function.name' is required", p), p + ".function.name",
                             "missing_required_parameter");
    if (!name->is_string()) return must_be(p + ".function.name", "a string", *name, false);
    call.name = name->get<std::string>();
    const json* args = field(*f, "arguments");
    const std::string apath = p + ".function.arguments";
    if (!args) {
      call.arguments = "{}";
    } else if (args->is_string()) {
      // The text as sent (its keys' order is the order the template shows).
      // Read as the body is: its nesting and duplicate keys are the body's
      // errors too (the template's reader, as deep, would drop the lot).
      const std::string& a = args->get_ref<const std::string&>();
      json parsed;
      DomBuilder b(parsed);
      if (!json::sax_parse(a.data(), a.data() + a.size(), &b)) {
        if (Err e = structure_error(b, fmt::format("'{}'", apath), apath)) return e;
        return invalid_request(fmt::format("'{}' must be a JSON object encoded as a string", apath),
                               apath);
      }
      if (!parsed.is_object())
        return invalid_request(fmt::format("'{}' must be a JSON object encoded as a string", apath), apath);
      call.arguments = a;
    } else if (args->is_object()) {
      call.arguments.clear();  // filled from the ordered document (read_ordered_arguments)
    } else {
      return must_be(apath, "a JSON object encoded as a string", *args, false);
    }
    out.push_back(std::move(call));
  }
  return std::nullopt;
}

// A message's content: a string, or an array of text parts concatenated.
Err read_content(const json& msg, const std::string& path, bool assistant, const RequestLimits& lim,
                 std::string& out) {
  const json* v = field(msg, "content");
  constexpr std::string_view what = "a string or an array of text parts";
  auto too_large = [&](size_t n) {
    return invalid_request(
        fmt::format("'{}' is {} bytes; at most {} are allowed", path, n, lim.max_content_bytes),
        path, "string_above_max_length");
  };
  if (!v) {
    // An assistant turn may have no content (OpenAI sends null with tool calls).
    if (assistant) return std::nullopt;
    return invalid_request(fmt::format("'{}' is required", path), path,
                           "missing_required_parameter");
  }
  if (v->is_string()) {
    const auto& s = v->get_ref<const std::string&>();
    if (s.size() > lim.max_content_bytes) return too_large(s.size());
    out = s;
    return std::nullopt;
  }
  if (!v->is_array()) return must_be(path, what, *v, false);
  if (v->empty()) return must_be(path, what, *v, true);
  size_t total = 0;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& part = (*v)[i];
    const std::string ppath = fmt::format("{}[{}]", path, i);
    if (!part.is_object()) return must_be(ppath, "an object", part, false);
    const json* type = field(part, "type");
    if (!type) {
      return invalid_request(fmt::format("'{}.type' is required", ppath), ppath + ".type",
                             "missing_required_parameter");
    }
    if (!type->is_string()) return must_be(ppath + ".type", "a string", *type, false);
    if (*type != "text") {
      return invalid_request(fmt::format("'{}.type' '{}' is not supported; only 'text' parts are",
                                         ppath, shorten(type->get_ref<const std::string&>(), 32)),
                             ppath + ".type", "unsupported_value");
    }
    const json* text = field(part, "text");
    if (!text) {
      return invalid_request(fmt::format("'{}.text' is required", ppath), ppath + ".text",
                             "missing_required_parameter");
    }
    if (!text->is_string()) return must_be(ppath + ".text", "a string", *text, false);
    total += text->get_ref<const std::string&>().size();
    if (total > lim.max_content_bytes) return too_large(total);
  }
  out.reserve(total);
  for (const json& part : *v) out += field(part, "text")->get_ref<const std::string&>();
  return std::nullopt;
}

Err read_messages(const json& body, const RequestLimits& lim, GenerationRequest& req) {
  const json* v = field(body, "messages");
  if (!v)
    return invalid_request("'messages' is required", "messages", "missing_required_parameter");
  if (!v->is_array()) return must_be("messages", "an array of message objects", *v, false);
  if (v->empty()) return invalid_request("'messages' must not be empty", "messages");
  if (v->size() > static_cast<size_t>(std::max(lim.max_messages, 0))) {
    return invalid_request(fmt::format("'messages' has {} entries; at most {} are allowed",
                                       v->size(), lim.max_messages),
                           "messages", "array_above_max_length");
  }
  req.messages.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string path = fmt::format("messages[{}]", i);
    if (!m.is_object()) return must_be(path, "an object", m, false);
    const json* role = field(m, "role");
    const std::string rpath = path + ".role";
    if (!role) {
      return invalid_request(fmt::format("'{}' is required", rpath), rpath,
                             "missing_required_parameter");
    }
    constexpr std::string_view roles = "one of 'system', 'user', 'assistant', 'tool', 'developer'";
    if (!role->is_string()) return must_be(rpath, roles, *role, false);
    const std::string& r = role->get_ref<const std::string&>();
    ChatMessage out;
    if (r == "system" || r == "developer") {
      out.role = "system";
    } else if (r == "user" || r == "assistant" || r == "tool") {
      out.role = r;
    } else if (r == "function") {
      return invalid_request(fmt::format("'{}' 'function' is not supported (the deprecated form of "
                                         "function calling); send 'tool' results",
                                         rpath),
                             rpath, "unsupported_value");
    } else {
      return invalid_request(fmt::format("'{}' must be {}, got '{}'", rpath, roles, shorten(r, 32)),
                             rpath);
    }
    if (field(m, "function_call")) {
      return unsupported(path + ".function_call",
                         fmt::format("'{}.function_call' is not supported (the deprecated form of "
                                     "function calling); send 'tool_calls'",
                                     path));
    }
    if (const json* t = field(m, "tool_calls"); t && !(t->is_array() && t->empty())) {
      if (out.role != "assistant") {
        return invalid_request(fmt::format("'{}.tool_calls' is only allowed in assistant messages", path),
                               path + ".tool_calls");
      }
      EDGELM_API_TRY(read_tool_calls(*t, path + ".tool_calls", out.tool_calls));
    }
    if (out.role == "tool") {
      EDGELM_API_TRY(read_string_at(m, "tool_call_id", path, out.tool_call_id));
    }
    EDGELM_API_TRY(read_string_at(m, "name", path, out.name));
    if (out.role == "assistant") {
      EDGELM_API_TRY(read_string_at(m, "reasoning_content", path, out.reasoning_content));
    }
    EDGELM_API_TRY(read_content(m, path + ".content", out.role == "assistant", lim, out.content));
    req.messages.push_back(std::move(out));
  }
  return std::nullopt;
}

Err read_tools(const json& body, GenerationRequest& req);

Err read_chat(const json& body, const RequestLimits& lim, GenerationRequest& req) {
  EDGELM_API_TRY(read_messages(body, lim, req));
  EDGELM_API_TRY(read_common(body, req));
  EDGELM_API_TRY(read_bool(body, "add_generation_prompt", "add_generation_prompt", req.add_generation_prompt));

  bool logprobs = false;
  EDGELM_API_TRY(read_bool(body, "logprobs", "logprobs", logprobs));
  if (const json* v = field(body, "top_logprobs")) {
    int64_t n = 0;
    EDGELM_API_TRY(read_int(*v, "top_logprobs", 0, kMaxTopLogprobs,
                            fmt::format("an integer between 0 and {}", kMaxTopLogprobs), n));
    if (!logprobs) {
      return invalid_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
    }
    req.top_logprobs = static_cast<int>(n);
  } else if (logprobs) {
    req.top_logprobs = 0;
  }

  // The deprecated forms of function calling are not supported; an empty
  // list or "none" asks for nothing, and some clients always send those.
  if (const json* v = field(body, "functions"); v && !(v->is_array() && v->empty()))
    return unsupported("functions", "'functions' is not supported (the deprecated form of 'tools'); send 'tools'");
  if (const json* v = field(body, "function_call"); v && !(v->is_string() && *v == "none"))
    return unsupported("function_call",
                       "'function_call' is not supported (the deprecated form of 'tool_choice'); send 'tool_choice'");
  return read_tools(body, req);
}

// tools, tool_choice and parallel_tool_calls.
Err read_tools(const json& body, GenerationRequest& req) {
  if (const json* v = field(body, "tools")) {
    if (!v->is_array()) return must_be("tools", "an array of tools", *v, false);
    if (v->size() > static_cast<size_t>(kMaxTools))
      return invalid_request(fmt::format("'tools' has {} entries; at most {} are allowed", v->size(), kMaxTools),
                             "tools", "array_above_max_length");
    for (size_t i = 0; i < v->size(); ++i) {
      const json& t = (*v)[i];
      const std::string p = fmt::format("tools[{}]", i);
      if (!t.is_object()) return must_be(p, "an object", t, false);
      const json* type = field(t, "type");
      if (!type)
        return invalid_request(fmt::format("'{}.type' is required", p), p + ".type", "missing_required_parameter");
      if (*type != "function") {
        return invalid_request(fmt::format("'{}.type' must be 'function' (the only kind of tool supported)", p),
                               p + ".type", type->is_string() ? "unsupported_value" : "invalid_type");
      }
      const json* f = field(t, "function");
      if (!f)
        return invalid_request(fmt::format("'{}.function' is required", p), p + ".function",
                               "missing_required_parameter");
      if (!f->is_object()) return must_be(p + ".function", "an object", *f, false);
      const json* name = field(*f, "name");
      if (!name)
        return invalid_request(fmt::format("'{}.function.name' is required", p), p + ".function.name",
                               "missing_required_parameter");
      if (!name->is_string()) return must_be(p + ".function.name", kNameRule, *name, false);
      if (!valid_function_name(name->get_ref<const std::string&>()))
        return must_be(p + ".function.name", kNameRule, *name, true);
      FunctionTool tool;
      tool.name = name->get<std::string>();
      for (const FunctionTool& other : req.tools)
        if (other.name == tool.name)
          return invalid_request(fmt::format("'{}.function.name' '{}' is declared twice", p, tool.name),
                                 p + ".function.name");
      std::string description;
      EDGELM_API_TRY(read_string_at(*f, "description", p + ".function", description));
      if (const json* params = field(*f, "parameters"); params && !params->is_object())
        return must_be(p + ".function.parameters", "a JSON Schema object", *params, false);
      if (const json* strict = field(*f, "strict"); strict && !strict->is_boolean())
        return must_be(p + ".function.strict", "a boolean", *strict, false);
      req.tools.push_back(std::move(tool));
    }
  }
  const bool have = !req.tools.empty();
  req.tool_choice = have ? ToolChoice::Auto : ToolChoice::None;
  if (const json* v = field(body, "tool_choice")) {
    constexpr std::string_view what =
        "'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}";
    if (v->is_string()) {
      const std::string& c = v->get_ref<const std::string&>();
      if (c == "none") req.tool_choice = ToolChoice::None;
      else if (c == "auto") req.tool_choice = ToolChoice::Auto;
      else if (c == "required") req.tool_choice = ToolChoice::Required;
      else return invalid_request(fmt::format("'tool_choice' must be {}, got '{}'", what, shorten(c, 32)), "tool_choice");
    } else if (v->is_object()) {
      const json* type = field(*v, "type");
      if (!type || *type != "function")
        return invalid_request("'tool_choice.type' must be 'function'", "tool_choice.type");
      const json* f = field(*v, "function");
      if (!f || !f->is_object())
        return invalid_request("'tool_choice.function' must be an object with the function's name",
                               "tool_choice.function");
      const json* name = field(*f, "name");
      if (!name || !name->is_string())
        return invalid_request("'tool_choice.function.name' must be a string", "tool_choice.function.name");
      req.tool_choice = ToolChoice::Function;
      req.tool_choice_name = name->get<std::string>();
      if (have && std::none_of(req.tools.begin(), req.tools.end(),
                               [&](const FunctionTool& t) { return t.name == req.tool_choice_name; })) {
        return invalid_request(fmt::format("'tool_choice.function.name' '{}' is not one of 'tools'",
                                           shorten(req.tool_choice_name, 64)),
                               "tool_choice.function.name");
      }
    } else {
      return must_be("tool_choice", what, *v, false);
    }
    if (!have && req.tool_choice != ToolChoice::None)
      return invalid_request("'tool_choice' needs 'tools': there is no function to call", "tool_choice");
  }
  EDGELM_API_TRY(read_bool(body, "parallel_tool_calls", "parallel_tool_calls", req.parallel_tool_calls));
  if (const json* v = field(body, "chat_template_kwargs")) {
    if (!v->is_object()) return must_be("chat_template_kwargs", "an object", *v, false);
    for (const char* reserved : {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})
      if (v->contains(reserved))
        return invalid_request(fmt::format("'chat_template_kwargs.{}' is set by the server, not the request", reserved),
                               std::string("chat_template_kwargs.") + reserved);
  }
  return std::nullopt;
}

// What needs the body's own key order: each tool's JSON and parameters, the
// tool calls sent as objects, chat_template_kwargs; and the schemas of the
// functions a constrained call may use.
Err read_ordered(std::string_view text, GenerationRequest& req) {
  const nlohmann::ordered_json doc = nlohmann::ordered_json::parse(text, nullptr, false);
  if (doc.is_discarded()) return not_json("cannot be read again");
  const auto dump = [](const nlohmann::ordered_json& j) {
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  };
  const auto& msgs = doc["messages"];
  for (size_t i = 0; i < req.messages.size(); ++i) {
    for (size_t k = 0; k < req.messages[i].tool_calls.size(); ++k) {
      ToolCall& c = req.messages[i].tool_calls[k];
      const auto& args = msgs[i]["tool_calls"][k]["function"]["arguments"];
      if (args.is_object()) c.arguments = dump(args);
    }
  }
  if (auto it = doc.find("chat_template_kwargs"); it != doc.end() && it->is_object())
    req.template_kwargs = dump(*it);
  const bool constrained = req.tool_choice == ToolChoice::Required || req.tool_choice == ToolChoice::Function;
  for (size_t i = 0; i < req.tools.size(); ++i) {
    FunctionTool& t = req.tools[i];
    const auto& tj = doc["tools"][i];
    t.json = dump(tj);
    const auto& fj = tj["function"];
    nlohmann::ordered_json params = {{"type", "object"}, {"properties", nlohmann::ordered_json::object()}};
    const auto given = fj.find("parameters");
    const bool has_params = given != fj.end() && given->is_object();
    if (has_params) params = *given;
    t.parameters = dump(params);
    if (!constrained || (req.tool_choice == ToolChoice::Function && t.name != req.tool_choice_name)) continue;
    // A call's arguments are an object (docs/tools.md: anything else is read
    // back as content), so the constraint makes one: no parameters, the
    // empty object only; a schema that names no type (`{}` is common), an
    // object of it; one that names another type cannot be called.
    nlohmann::ordered_json shape = params;
    if (!has_params) {
      shape["additionalProperties"] = false;
    } else if (!shape.contains("type")) {
      shape["type"] = "object";
    } else {
      const auto& ty = shape["type"];
      const bool object = ty == "object" ||
                          (ty.is_array() && std::find(ty.begin(), ty.end(), "object") != ty.end());
      if (!object) {
        const std::string path = fmt::format("tools[{}].function.parameters.type", i);
        return invalid_request(
            fmt::format("'{}' must be \"object\": a function's arguments are an object", path),
            path, "unsupported_schema");
      }
      if (ty.is_array()) shape["type"] = "object";
    }
    const CompiledSchema c = compile_json_schema(shape);
    if (!c.schema) {
      const std::string path = fmt::format("tools[{}].function.parameters{}", i, c.path);
      return invalid_request(fmt::format("'{}': {} (needed to constrain the call that 'tool_choice' asks for)", path,
                                         c.message),
                             path, "unsupported_schema");
    }
    t.schema = c.schema;
  }
  return std::nullopt;
}

// response_format, for chat and completions. The schema is read again from
// the body as an ordered document: its properties are written in the order
// the client declared them.
Err read_response_format(const json& body, std::string_view text, GenerationRequest& req) {
  const json* v = field(body, "response_format");
  if (!v) return std::nullopt;
  if (!v->is_object()) return must_be("response_format", "an object", *v, false);
  const json* type = field(*v, "type");
  if (!type) {
    return invalid_request("'response_format.type' is required", "response_format.type",
                           "missing_required_parameter");
  }
  if (!type->is_string()) return must_be("response_format.type", "a string", *type, false);
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    req.schema = json_object_schema();
  } else if (t == "json_schema") {
    const json* js = field(*v, "json_schema");
    if (!js) {
      return invalid_request("'response_format.json_schema' is required", "response_format.json_schema",
                             "missing_required_parameter");
    }
    if (!js->is_object()) return must_be("response_format.json_schema", "an object", *js, false);
    if (const json* n = field(*js, "name"); n && !n->is_string())
      return must_be("response_format.json_schema.name", "a string", *n, false);
    if (const json* st = field(*js, "strict"); st && !st->is_boolean())
      return must_be("response_format.json_schema.strict", "a boolean", *st, false);
    const json* sc = field(*js, "schema");
    if (!sc) {
      return invalid_request("'response_format.json_schema.schema' is required",
                             "response_format.json_schema.schema", "missing_required_parameter");
    }
    if (!sc->is_object() && !sc->is_boolean())
      return must_be("response_format.json_schema.schema", "an object", *sc, false);
    const nlohmann::ordered_json doc = nlohmann::ordered_json::parse(text, nullptr, false);
    if (doc.is_discarded()) return not_json("cannot be read again");
    const CompiledSchema c = compile_json_schema(doc["response_format"]["json_schema"]["schema"]);
    if (!c.schema) {
      const std::string path = "response_format.json_schema.schema" + c.path;
      return invalid_request(fmt::format("'{}': {}", path, c.message), path, "unsupported_schema");
    }
    req.schema = c.schema;
  } else {
    return invalid_request(
        fmt::format("'response_format.type' '{}' is not supported; 'text', 'json_object' and 'json_schema' are",
                    shorten(t, 32)),
        "response_format.type", "unsupported_value");
  }
  req.response_format = t;
  if (!req.stop.empty())
    return invalid_request("'stop' cannot be used with a JSON 'response_format': a stop string could cut the JSON short",
                           "stop", "unsupported_parameter");
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// Completions

Err read_prompt_text(const json& v, const std::string& path, const RequestLimits& lim,
                     GenerationRequest& req) {
  const auto& s = v.get_ref<const std::string&>();
  if (s.empty()) return invalid_request(fmt::format("'{}' must not be empty", path), path);
  if (s.size() > lim.max_content_bytes) {
    return invalid_request(fmt::format("'{}' is {} bytes; at most {} are allowed", path, s.size(),
                                       lim.max_content_bytes),
                           path, "string_above_max_length");
  }
  req.prompt = s;
  return std::nullopt;
}

Err read_prompt_tokens(const json& v, const std::string& path, const RequestLimits& lim,
                       GenerationRequest& req) {
  if (v.empty()) return invalid_request(fmt::format("'{}' must not be empty", path), path);
  // A token stands for at least one byte of text, so the text limit bounds ids too.
  if (v.size() > lim.max_content_bytes) {
    return invalid_request(fmt::format("'{}' has {} tokens; at most {} are allowed", path, v.size(),
                                       lim.max_content_bytes),
                           path, "array_above_max_length");
  }
  const int64_t hi = lim.n_vocab > 0 ? lim.n_vocab - 1 : INT32_MAX;
  const std::string what = fmt::format("a token id (an integer from 0 to {})", hi);
  req.prompt_tokens.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t id = 0;
    EDGELM_API_TRY(read_int(v[i], fmt::format("{}[{}]", path, i), 0, hi, what, id));
    req.prompt_tokens.push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

// A string, an array of one string, an array of token ids, or an array of
// one array of token ids.
Err read_prompt(const json& body, const RequestLimits& lim, GenerationRequest& req) {
  const json* v = field(body, "prompt");
  if (!v) return invalid_request("'prompt' is required", "prompt", "missing_required_parameter");
  if (v->is_string()) return read_prompt_text(*v, "prompt", lim, req);
  if (!v->is_array()) {
    return must_be("prompt", "a string or an array of token ids", *v, false);
  }
  if (v->empty()) return invalid_request("'prompt' must not be empty", "prompt");
  const json& first = (*v)[0];
  if (first.is_string() || first.is_array()) {
    if (v->size() > 1) {
      return invalid_request(
          fmt::format("only one prompt per request is supported; 'prompt' has {}", v->size()),
          "prompt", "unsupported_value");
    }
    if (first.is_string()) return read_prompt_text(first, "prompt[0]", lim, req);
    return read_prompt_tokens(first, "prompt[0]", lim, req);
  }
  return read_prompt_tokens(*v, "prompt", lim, req);
}

Err read_completion(const json& body, const RequestLimits& lim, GenerationRequest& req) {
  EDGELM_API_TRY(read_prompt(body, lim, req));
  EDGELM_API_TRY(read_common(body, req));
  if (const json* v = field(body, "logprobs")) {
    int64_t n = 0;
    EDGELM_API_TRY(read_int(*v, "logprobs", 0, kMaxTopLogprobs,
                            fmt::format("an integer between 0 and {}", kMaxTopLogprobs), n));
    req.top_logprobs = static_cast<int>(n);
  }
  bool echo = false;
  EDGELM_API_TRY(read_bool(body, "echo", "echo", echo));
  if (echo) return unsupported("echo", "'echo' is not supported");
  if (const json* v = field(body, "best_of")) {
    int64_t n = 0;
    EDGELM_API_TRY(read_int(*v, "best_of", INT64_MIN, INT64_MAX, "an integer", n));
    if (n != 1) {
      return invalid_request(
          fmt::format("'best_of' must be 1 (only best_of=1 is supported), got {}", describe(*v)),
          "best_of", "unsupported_value");
    }
  }
  std::string suffix;
  EDGELM_API_TRY(read_string(body, "suffix", suffix));
  if (!suffix.empty()) return unsupported("suffix", "'suffix' is not supported");
  return std::nullopt;
}

ParsedRequest parse_request(std::string_view body, const RequestLimits& lim, bool chat) {
  try {
    json root;
    if (Err e = parse_body(body, root)) return std::move(*e);
    GenerationRequest req;
    req.chat = chat;
    if (Err e = chat ? read_chat(root, lim, req) : read_completion(root, lim, req)) {
      return std::move(*e);
    }
    if (Err e = read_response_format(root, body, req)) return std::move(*e);
    if (chat && (!req.tools.empty() || root.contains("chat_template_kwargs") ||
                 std::any_of(req.messages.begin(), req.messages.end(),
                             [](const ChatMessage& m) { return !m.tool_calls.empty(); }))) {
      if (Err e = read_ordered(body, req)) return std::move(*e);
    }
    if (req.schema && req.tool_choice != ToolChoice::None && req.tool_choice != ToolChoice::Auto)
      return invalid_request("'response_format' cannot be combined with a 'tool_choice' that forces a call",
                             "response_format", "unsupported_parameter");
    // Every range is checked above; this keeps the two checks from drifting apart.
    if (Status st = req.sampling.validate(); !st.ok()) return invalid_request(st.message());
    return req;
  } catch (const std::exception& ex) {
    // Out of memory or a bug: a 500 for this request, never a crash of the server.
    ApiError e;
    e.status = 500;
    e.type = "server_error";
    e.code = "internal_error";
    e.message =
        fmt::format("internal error while reading the request: {}", shorten(ex.what(), 200));
    return e;
  } catch (...) {
    ApiError e;
    e.status = 500;
    e.type = "server_error";
    e.code = "internal_error";
    e.message = "internal error while reading the request";
    return e;
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// Public functions

ApiError invalid_request(std::string message, std::string param, std::string code) {
  ApiError e;
  e.status = 400;
  e.type = "invalid_request_error";
  e.code = std::move(code);
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

SamplingParams openai_default_sampling() {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  p.presence_penalty = 0.0f;
  p.frequency_penalty = 0.0f;
  p.seed = 0;
  return p;
}

ParsedRequest parse_chat_request(std::string_view body, const RequestLimits& limits) {
  return parse_request(body, limits, true);
}

ParsedRequest parse_completion_request(std::string_view body, const RequestLimits& limits) {
  return parse_request(body, limits, false);
}

std::variant<TokenizeRequest, ApiError> parse_tokenize_request(std::string_view body) {
  json j;
  if (Err e = parse_body(body, j)) return std::move(*e);
  auto it = j.find("content");
  if (it == j.end() || !it->is_string())
    return invalid_request("expected {\"content\": string}", "content", "invalid_request");
  TokenizeRequest r;
  for (auto [key, out] : {std::pair<const char*, bool*>{"add_special", &r.add_special},
                          {"parse_special", &r.parse_special},
                          {"with_pieces", &r.with_pieces}})
    if (Err e = read_bool(j, key, key, *out)) return *e;
  r.content = std::move(it->get_ref<std::string&>());
  return r;
}

std::variant<std::vector<int32_t>, ApiError> parse_detokenize_request(std::string_view body,
                                                                      int32_t n_vocab) {
  json j;
  if (Err e = parse_body(body, j)) return std::move(*e);
  auto it = j.find("tokens");
  if (it == j.end() || !it->is_array())
    return invalid_request("expected {\"tokens\": [ids]}", "tokens", "invalid_request");
  std::vector<int32_t> ids;
  ids.reserve(it->size());
  for (const json& v : *it) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= n_vocab)
      return invalid_request("'tokens' must hold vocabulary ids", "tokens", "invalid_token");
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

}  // namespace edgelm::serve
