/* attn/status.hpp: Status and Result<T>, the error vocabulary of the C++ API.
 * Dependency-free, so the kernels use it too; no exception crosses the API. */
#ifndef ATTN_STATUS_HPP_
#define ATTN_STATUS_HPP_

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

// A value or the Status that explains why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T&& operator*() && { return std::move(*value_); }

 private:
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

#endif  // ATTN_STATUS_HPP_
