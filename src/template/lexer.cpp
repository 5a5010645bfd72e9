#include "core/utf8.h"
#include "template/lexer.h"

#include <array>
#include <optional>

#include "template/pystr.h"

namespace edgelm::jinja {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  Result<std::vector<Token>> run() {
    size_t pos = 0;
    while (pos < s_.size()) {
      size_t k = s_.find('{', pos);
      while (k != std::string::npos && k + 1 < s_.size() && s_[k + 1] != '{' && s_[k + 1] != '%' &&
             s_[k + 1] != '#')
        k = s_.find('{', k + 1);
      if (k == std::string::npos || k + 1 >= s_.size()) {
        emit_text(pos, s_.substr(pos));
        break;
      }
      const char kind = s_[k + 1];
      const char mod = k + 2 < s_.size() && (s_[k + 2] == '-' || s_[k + 2] == '+') ? s_[k + 2] : 0;
      emit_text(pos, strip_before_tag(pos, k, mod, kind != '{'));
      line_at(k);
      size_t p = k + 2 + (mod ? 1 : 0);
      if (kind == '%') {
        if (auto after = raw_block(p)) {
          EDGELM_ASSIGN(pos, *after);
          continue;
        }
      }
      if (kind == '#') {
        const size_t e = s_.find("#}", p);
        if (e == std::string::npos) return make_error("line {}: missing end of comment tag", line_);
        char endmod = e > p && (s_[e - 1] == '-' || s_[e - 1] == '+') ? s_[e - 1] : 0;
        pos = after_end(e + 2, endmod);
        continue;
      }
      toks_.push_back({kind == '{' ? Token::Type::kVarBegin : Token::Type::kBlockBegin, "", line_});
      EDGELM_ASSIGN(pos, lex_tag(p, kind == '{'));
    }
    line_at(s_.size());
    toks_.push_back({Token::Type::kEof, "", line_});
    return std::move(toks_);
  }

 private:
  // The text s_[pos, k) before a tag, with the tag's whitespace control
  // applied: `-` strips all trailing whitespace; else, for block and comment
  // tags, lstrip_blocks drops the spaces between the line start and the tag.
  std::string strip_before_tag(size_t pos, size_t k, char mod, bool block) const {
    std::string text = s_.substr(pos, k - pos);
    if (mod == '-') return pystr::strip(text, std::nullopt, false, true);
    if (mod == '+' || !block) return text;
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    const bool line_starting = pos == 0 || s_[pos - 1] == '\n';
    if ((l_pos > 0 || line_starting) && l_pos < text.size()) {
      for (size_t i = l_pos; i < text.size();) {
        const size_t n = pystr::space_at(text, i);
        if (n == 0) return text;
        i += n;
      }
      text.resize(l_pos);
    }
    return text;
  }

  // Skips Python whitespace from p.
  size_t skip_space(size_t p) const {
    while (size_t n = pystr::space_at(s_, p)) p += n;
    return p;
  }

  // If `raw -%}` or `raw %}` follows p (just after `{%` and its modifier):
  // emits the text up to `{% endraw %}` as it is and returns the offset after
  // that tag. nullopt when this is not a raw block.
  std::optional<Result<size_t>> raw_block(size_t p) {
    size_t q = skip_space(p);
    if (s_.compare(q, 3, "raw") != 0) return std::nullopt;
    q = skip_space(q + 3);
    if (s_.compare(q, 3, "-%}") == 0) q = skip_space(q + 3);  // no trim_blocks after raw
    else if (s_.compare(q, 2, "%}") == 0) q += 2;
    else return std::nullopt;
    for (size_t k = s_.find("{%", q); k != std::string::npos; k = s_.find("{%", k + 2)) {
      const char mod = k + 2 < s_.size() && (s_[k + 2] == '-' || s_[k + 2] == '+') ? s_[k + 2] : 0;
      size_t e = skip_space(k + 2 + (mod ? 1 : 0));
      if (s_.compare(e, 6, "endraw") != 0) continue;
      e = skip_space(e + 6);
      char endmod = 0;
      if (e < s_.size() && (s_[e] == '-' || s_[e] == '+')) endmod = s_[e++];
      if (s_.compare(e, 2, "%}") != 0) continue;
      emit_text(q, strip_before_tag(q, k, mod, true));
      return Result<size_t>(after_end(e + 2, endmod));
    }
    line_at(p);
    return Result<size_t>(make_error("line {}: missing end of raw directive", line_));
  }

  // Advances the line counter to byte offset `to`.
  void line_at(size_t to) {
    for (; line_pos_ < to && line_pos_ < s_.size(); ++line_pos_)
      if (s_[line_pos_] == '\n') ++line_;
  }

  void emit_text(size_t at, std::string text) {
    if (text.empty()) return;
    line_at(at);
    toks_.push_back({Token::Type::kText, std::move(text), line_});
  }

  // After an end tag that ends at p: `-` eats all whitespace, `+` nothing,
  // else trim_blocks eats one newline.
  size_t after_end(size_t p, char mod) {
    if (mod == '-') {
      while (size_t n = pystr::space_at(s_, p)) p += n;
    } else if (mod != '+' && p < s_.size() && s_[p] == '\n') {
      ++p;
    }
    return p;
  }

  Result<size_t> lex_tag(size_t p, bool var) {
    std::vector<char> balance;
    while (true) {
      while (p < s_.size() && pystr::space_at(s_, p)) p += pystr::space_at(s_, p);
      line_at(p);
      if (p >= s_.size()) return make_error("line {}: unexpected end of template inside a tag", line_);
      if (balance.empty()) {
        if (var) {
          if (s_.compare(p, 3, "-}}") == 0) {
            toks_.push_back({Token::Type::kVarEnd, "", line_});
            return after_end(p + 3, '-');
          }
          if (s_.compare(p, 2, "}}") == 0) {
            toks_.push_back({Token::Type::kVarEnd, "", line_});
            return p + 2;
          }
        } else {
          if ((s_[p] == '-' || s_[p] == '+') && s_.compare(p + 1, 2, "%}") == 0) {
            toks_.push_back({Token::Type::kBlockEnd, "", line_});
            return after_end(p + 3, s_[p]);
          }
          if (s_.compare(p, 2, "%}") == 0) {
            toks_.push_back({Token::Type::kBlockEnd, "", line_});
            return after_end(p + 2, 0);
          }
        }
      }
      const char c = s_[p];
      if (is_digit(c)) {
        p = number(p);
        continue;
      }
      if (is_name_start(c)) {
        const size_t b = p;
        while (p < s_.size() && is_name_char(s_[p])) ++p;
        toks_.push_back({Token::Type::kName, s_.substr(b, p - b), line_});
        continue;
      }
      if (c == '\'' || c == '"') {
        EDGELM_ASSIGN(p, string(p));
        continue;
      }
      static const std::array<const char*, 26> ops = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*",
                                                       "%",  "~",  "[",  "]",  "(",  ")",  "{", "}", "=", ">",
                                                       "<",  ".",  ":",  "|",  ",",  ";"};
      const char* op = nullptr;
      for (const char* o : ops)
        if (s_.compare(p, std::char_traits<char>::length(o), o) == 0) {
          op = o;
          break;
        }
      if (!op) return make_error("line {}: unexpected character '{}'", line_, printable(s_.substr(p, 1)));
      const std::string o(op);
      if (o == "(" || o == "[" || o == "{") {
        balance.push_back(o == "(" ? ')' : o == "[" ? ']' : '}');
      } else if (o == ")" || o == "]" || o == "}") {
        if (balance.empty() || balance.back() != o[0])
          return make_error("line {}: unexpected '{}'", line_, o);
        balance.pop_back();
      }
      toks_.push_back({Token::Type::kOp, o, line_});
      p += o.size();
    }
  }

  // Digits with `_` separators; a float needs digits after the `.` or an exponent.
  size_t number(size_t p) {
    const size_t b = p;
    auto digits = [&](size_t q) {
      while (q < s_.size() && (is_digit(s_[q]) || (s_[q] == '_' && q + 1 < s_.size() && is_digit(s_[q + 1])))) ++q;
      return q;
    };
    // 0x / 0o / 0b integers.
    if (s_[p] == '0' && p + 2 < s_.size() && std::string("xXoObB").find(s_[p + 1]) != std::string::npos &&
        hexval(s_[p + 2]) >= 0) {
      const char base = static_cast<char>(s_[p + 1] | 0x20);
      size_t q = p + 2;
      while (q < s_.size() && (hexval(s_[q]) >= 0 || s_[q] == '_')) ++q;
      std::string t;
      int64_t v = 0;
      const int radix = base == 'x' ? 16 : base == 'o' ? 8 : 2;
      for (size_t i = p + 2; i < q; ++i)
        if (s_[i] != '_') v = v * radix + hexval(s_[i]);
      toks_.push_back({Token::Type::kInt, std::to_string(v), line_});
      return q;
    }
    p = digits(p);
    bool is_float = false;
    if (p + 1 < s_.size() && s_[p] == '.' && is_digit(s_[p + 1])) {
      is_float = true;
      p = digits(p + 1);
    }
    if (p < s_.size() && (s_[p] == 'e' || s_[p] == 'E')) {
      size_t q = p + 1;
      if (q < s_.size() && (s_[q] == '+' || s_[q] == '-')) ++q;
      if (q < s_.size() && is_digit(s_[q])) {
        is_float = true;
        p = digits(q);
      }
    }
    std::string t;
    for (size_t i = b; i < p; ++i)
      if (s_[i] != '_') t.push_back(s_[i]);
    toks_.push_back({is_float ? Token::Type::kFloat : Token::Type::kInt, t, line_});
    return p;
  }

  // A quoted literal with Python's escapes.
  Result<size_t> string(size_t p) {
    const char q = s_[p++];
    std::string out;
    while (true) {
      if (p >= s_.size()) return make_error("line {}: unterminated string", line_);
      const char c = s_[p];
      if (c == q) return finish_string(out, p + 1);
      if (c != '\\') {
        out.push_back(c);
        ++p;
        continue;
      }
      if (p + 1 >= s_.size()) return make_error("line {}: unterminated string", line_);
      const char e = s_[p + 1];
      p += 2;
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x':
        case 'u':
        case 'U': {
          const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (int i = 0; i < n; ++i) {
            if (p >= s_.size() || hexval(s_[p]) < 0)
              return make_error("line {}: truncated \\{} escape in a string", line_, e);
            cp = cp * 16 + static_cast<uint32_t>(hexval(s_[p++]));
          }
          if (cp > 0x10FFFF) return make_error("line {}: bad \\U escape in a string", line_);
          if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;
          utf8_append(out, cp, /*keep_surrogates=*/true);
          break;
        }
        case 'N': return make_error("line {}: \\N{{...}} escapes are not supported", line_);
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int i = 0; i < 2 && p < s_.size() && s_[p] >= '0' && s_[p] <= '7'; ++i)
              cp = cp * 8 + static_cast<uint32_t>(s_[p++] - '0');
            utf8_append(out, cp, /*keep_surrogates=*/true);
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
  }

  size_t finish_string(std::string& out, size_t p) {
    toks_.push_back({Token::Type::kString, std::move(out), line_});
    return p;
  }

  std::string s_;
  std::vector<Token> toks_;
  int line_ = 1;
  size_t line_pos_ = 0;
};

}  // namespace

Result<std::vector<Token>> tokenize(std::string_view source) {
  // Newlines normalised (\r\n and \r become \n), one trailing newline dropped.
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s.push_back(source[i]);
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return Lexer(std::move(s)).run();
}

}  // namespace edgelm::jinja
