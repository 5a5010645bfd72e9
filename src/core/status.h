// Errors as values. Everything that reads outside data (files, requests, flags)
// returns Result<T>; a failure carries one human-readable line naming the problem.
#pragma once

#include <fmt/format.h>

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace edgelm {

struct Error {
  std::string message;
};

// Text from outside (a name read from a file) made safe for a one-line
// message: control bytes escaped as \xNN, cut to `max` bytes with "...".
inline std::string printable(std::string_view s, size_t max = 200) {
  std::string out;
  for (unsigned char c : s) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out.push_back(static_cast<char>(c));
  }
  return out;
}

template <typename... Args>
Error make_error(fmt::format_string<Args...> f, Args&&... args) {
  return Error{fmt::format(f, std::forward<Args>(args)...)};
}

// A value or an Error. A small stand-in for C++23 std::expected.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Error e) : v_(std::move(e)) {}      // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const {
    assert(!ok());
    return std::get<1>(v_);
  }
  const std::string& message() const { return error().message; }

 private:
  std::variant<T, Error> v_;
};

// Result<void>: success or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error e) : err_(std::move(e)) {}  // NOLINT
  static Status Ok() { return Status(); }

  bool ok() const { return !err_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return *err_; }
  const std::string& message() const { return err_->message; }

 private:
  std::optional<Error> err_;
};

}  // namespace edgelm

// Propagate a failed Status or Result from the current function.
#define EDGELM_TRY(expr)                                      \
  do {                                                        \
    auto&& edgelm_try_r_ = (expr);                            \
    if (!edgelm_try_r_.ok()) return edgelm_try_r_.error();    \
  } while (0)

#define EDGELM_CONCAT_INNER(a, b) a##b
#define EDGELM_CONCAT(a, b) EDGELM_CONCAT_INNER(a, b)
// EDGELM_ASSIGN(auto x, expr): declare x from a Result, or return its Error.
#define EDGELM_ASSIGN(decl, expr) EDGELM_ASSIGN_IMPL(EDGELM_CONCAT(edgelm_r_, __LINE__), decl, expr)
#define EDGELM_ASSIGN_IMPL(tmp, decl, expr) \
  auto tmp = (expr);                        \
  if (!tmp.ok()) return tmp.error();        \
  decl = std::move(tmp).value()
