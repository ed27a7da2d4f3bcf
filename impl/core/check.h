// Propagation and invariant macros for impl code.
#pragma once

#include "impl/core/status.h"

// Returns the status from the enclosing function if it is an error.
#define SR_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::shardrec::Status sr_status_ = (expr);  \
    if (!sr_status_.ok()) return sr_status_; \
  } while (0)

// An invariant that only a bug can break. It throws (caught by the capi guard as an internal
// error) rather than aborting, so that no input can bring the host process down.
#define SR_CHECK(cond)                                                                         \
  do {                                                                                         \
    if (!(cond))                                                                               \
      throw ::shardrec::StatusError(                                                           \
          ::shardrec::Status::Internal("check failed: " #cond " at " __FILE__ ":", __LINE__)); \
  } while (0)
