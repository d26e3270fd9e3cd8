/* attn/status.hpp: Status and Result<T>, the error vocabulary of the C++ API.
 * Dependency-free, so the kernels use it too; no exception crosses the API. */
#ifndef ATTN_STATUS_HPP_
#define ATTN_STATUS_HPP_

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace attn {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kIoError,
  kUnsupported,
  kOutOfMemory,
  kInternal,
  kCancelled,  // the caller asked the call to stop (QuantizeModel's stop)
};

// A code and a one-line message naming what was wrong, what was received and
// what was wanted.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string message) {
  return {StatusCode::kInvalidArgument, std::move(message)};
}
inline Status IoError(std::string message) {
  return {StatusCode::kIoError, std::move(message)};
}
inline Status Unsupported(std::string message) {
  return {StatusCode::kUnsupported, std::move(message)};
}
inline Status OutOfMemory(std::string message) {
  return {StatusCode::kOutOfMemory, std::move(message)};
}
inline Status Internal(std::string message) {
  return {StatusCode::kInternal, std::move(message)};
}
inline Status Cancelled(std::string message) {
  return {StatusCode::kCancelled, std::move(message)};
}

// A value or the Status that explains why there is none. Reading the value
// of a failed Result is a bug in the caller: it aborts, printing the status,
// rather than returning garbage.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status)                          // NOLINT: implicit by design
      : status_(status.ok() ? Internal("Result made from an OK Status and "
                                       "no value")
                            : std::move(status)) {}
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *Checked(); }
  const T& value() const& { return *Checked(); }
  T&& value() && { return std::move(*Checked()); }
  T* operator->() { return Checked(); }
  const T* operator->() const { return Checked(); }
  T& operator*() & { return *Checked(); }
  const T& operator*() const& { return *Checked(); }
  T&& operator*() && { return std::move(*Checked()); }

 private:
  T* Checked() {
    CheckOk();
    return &*value_;
  }
  const T* Checked() const {
    CheckOk();
    return &*value_;
  }
  void CheckOk() const {
    if (value_) return;
    std::fprintf(stderr, "attn: read the value of a failed Result: %s\n",
                 status_.message().c_str());
    std::abort();
  }

  std::optional<T> value_;
  Status status_;
};

}  // namespace attn

// Returns early from the enclosing function when `expr` yields a failed
// Status.
#define ATTN_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::attn::Status attn_status_ = (expr);        \
    if (!attn_status_.ok()) return attn_status_; \
  } while (0)

// `ATTN_ASSIGN_OR_RETURN(lhs, expr)`: evaluates `expr`, a Result<T>; returns
// its Status from the enclosing function when it failed, else moves the value
// into `lhs` (a declaration such as `auto x` or an existing variable).
#define ATTN_ASSIGN_OR_RETURN(lhs, expr) \
  ATTN_ASSIGN_OR_RETURN_IMPL_(ATTN_CONCAT_(attn_result_, __LINE__), lhs, expr)
#define ATTN_ASSIGN_OR_RETURN_IMPL_(result, lhs, expr) \
  auto result = (expr);                                \
  if (!result.ok()) return result.status();            \
  lhs = std::move(result).value()
#define ATTN_CONCAT_(a, b) ATTN_CONCAT_IMPL_(a, b)
#define ATTN_CONCAT_IMPL_(a, b) a##b

#endif  // ATTN_STATUS_HPP_
