// Status and Result<T>: how every fallible call of promptcache reports failure.
//
// The library does not throw: a bad file, flag, request or prompt comes back as a non-OK Status
// (or a Result holding one) whose message is one line naming the problem. Broken internal
// invariants are different: they abort (a bug in promptcache itself). Part of the public API
// (promptcache/promptcache.h); the engine's own code uses the same types.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace promptcache {

// What kind of failure a Status reports.
enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad input from a caller or user (flags, requests, prompts)
  kNotFound,         // a file, key, tensor, module or schema that is not there
  kDataLoss,         // a file that is truncated or corrupt
  kUnimplemented,    // valid input this engine does not support (architecture, tensor type)
  kOutOfRange,       // beyond a limit (context length, cache budget)
  kResourceExhausted,
  kIoError,
  kInternal,
};

// Success, or a failure's code and one-line message.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // A copy whose message is prefixed with `context: `, for adding the file or element name.
  Status WithContext(const std::string& context) const {
    return ok() ? *this : Status(code_, context + ": " + message_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Shorthands for a failed Status of each code.
inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

namespace status_internal {
// Reading the value of a failed Result (or making a Result of an OK Status) is a caller bug:
// abort with where it happened rather than return garbage.
[[noreturn]] inline void ResultMisuse(const char* what) {
  std::fprintf(stderr, "promptcache: %s\n", what);
  std::abort();
}
}  // namespace status_internal

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) status_internal::ResultMisuse("Result made of an OK Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  // The value; calling these on a failed Result aborts.
  T& value() & {
    Check();
    return std::get<T>(v_);
  }
  const T& value() const& {
    Check();
    return std::get<T>(v_);
  }
  T&& value() && {
    Check();
    return std::get<T>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void Check() const {
    if (!ok()) status_internal::ResultMisuse("value() of a failed Result");
  }

  std::variant<T, Status> v_;
};

}  // namespace promptcache

#define PC_CONCAT_INNER(a, b) a##b
#define PC_CONCAT(a, b) PC_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define PC_RETURN_IF_ERROR(expr)               \
  do {                                         \
    ::promptcache::Status pc_status_ = (expr); \
    if (!pc_status_.ok()) return pc_status_;   \
  } while (0)

// PC_ASSIGN_OR_RETURN(auto x, MakeX()): unwraps a Result or returns its Status.
#define PC_ASSIGN_OR_RETURN(lhs, expr) \
  PC_ASSIGN_OR_RETURN_IMPL(PC_CONCAT(pc_result_, __LINE__), lhs, expr)
#define PC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
