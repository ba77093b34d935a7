// The one error type of gpupool's libraries: a Result<T> holds either a value
// or an Error (one human-readable line). Exceptions are used only at the top of
// the binaries; everything below returns Result.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace gpupool {

struct Error {
  std::string message;
};

// Builds an Error from a fmt format string: `return fail("bad value {}", v);`
template <typename... Args>
Error fail(fmt::format_string<Args...> format, Args&&... args) {
  return Error{fmt::format(format, std::forward<Args>(args)...)};
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(Error error) : state_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(state_); }
  const T& value() const& { return std::get<0>(state_); }
  T&& value() && { return std::get<0>(std::move(state_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const& { return std::get<1>(state_); }
  Error&& error() && { return std::get<1>(std::move(state_)); }

 private:
  std::variant<T, Error> state_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const& { return *error_; }
  Error&& error() && { return std::move(*error_); }

 private:
  std::optional<Error> error_;
};

}  // namespace gpupool

// Propagates an error: TRY(expr) for Result<void>, TRY_ASSIGN(var, expr) to
// bind the value. Macros because C++20 has no early return from an expression.
#define GPUPOOL_CONCAT_INNER(a, b) a##b
#define GPUPOOL_CONCAT(a, b) GPUPOOL_CONCAT_INNER(a, b)

#define TRY(expr)                                                  \
  do {                                                             \
    auto&& try_result_ = (expr);                                   \
    if (!try_result_.ok()) return std::move(try_result_).error();  \
  } while (false)

#define TRY_ASSIGN(var, expr) TRY_ASSIGN_IMPL(GPUPOOL_CONCAT(try_result_, __LINE__), var, expr)
#define TRY_ASSIGN_IMPL(tmp, var, expr)                  \
  auto tmp = (expr);                                     \
  if (!tmp.ok()) return std::move(tmp).error();          \
  var = std::move(tmp).value()
