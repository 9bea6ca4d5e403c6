// Internal status type of the core: a code from attnrt.h and the message that goes with it.
// Converted to the thread-local last-error message at the ABI boundary (core/abi_guard.h).
#pragma once

#include <string>
#include <utility>

#include "attnrt/attnrt.h"

namespace attnrt::core {

struct Status {
  attnrt_status code = ATTNRT_OK;
  std::string message;

  static Status Ok() { return {}; }
  bool ok() const { return code == ATTNRT_OK; }
};

inline Status InvalidArgument(std::string message) {
  return {ATTNRT_ERROR_INVALID_ARGUMENT, std::move(message)};
}
inline Status Unsupported(std::string message) {
  return {ATTNRT_ERROR_UNSUPPORTED, std::move(message)};
}
inline Status NotFound(std::string message) { return {ATTNRT_ERROR_NOT_FOUND, std::move(message)}; }
inline Status PlanMismatch(std::string message) {
  return {ATTNRT_ERROR_PLAN_MISMATCH, std::move(message)};
}
inline Status AbiMismatch(std::string message) {
  return {ATTNRT_ERROR_ABI_MISMATCH, std::move(message)};
}
inline Status Internal(std::string message) { return {ATTNRT_ERROR_INTERNAL, std::move(message)}; }

// Sets (or clears, for OK) the calling thread's attnrt_last_error_message and returns the code: for
// ABI entry points implemented outside core/abi.cpp.
attnrt_status RecordLastError(const Status& status);

}  // namespace attnrt::core

#define ATTNRT_RETURN_IF_ERROR(expr)     \
  do {                                   \
    ::attnrt::core::Status _st = (expr); \
    if (!_st.ok()) return _st;           \
  } while (0)
