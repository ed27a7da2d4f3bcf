/**
 * @file shardrec/common.h
 * @brief Conventions shared by every libshardrec header: export macro, status codes, the
 *        per-thread error message, element types, devices and every opaque handle type.
 *
 * Conventions (the full page is docs/c-api.md):
 *  - Every fallible function returns shardrec_status_t: SHARDREC_OK (0) or a negative code.
 *  - On failure, shardrec_last_error() describes what went wrong on the calling thread, with
 *    context (argument, table, rank). Read it before the next libshardrec call on that thread.
 *  - Library-allocated results come first as `T** out`; the caller owns them and releases them
 *    with the matching destroy function. Every destroy accepts NULL and does nothing.
 *  - Pointers always come with a length. A call that fails changes no state.
 *  - Option structs start with `uint32_t version`; fill them with their `_init()` function
 *    (bindings) or `_INIT` macro (C), then set fields. Fields are only ever appended.
 *  - Handles are not thread-safe unless their documentation says otherwise.
 *  - GPU-capable calls take a trailing `void* stream` (a cudaStream_t, NULL for the default
 *    stream); they are asynchronous on that stream. Host calls are synchronous. A CUDA MLP
 *    (dense.h) is the exception: its stream is set once, in shardrec_mlp_options_t.
 */
#ifndef SHARDREC_COMMON_H_
#define SHARDREC_COMMON_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define SHARDREC_API __declspec(dllexport)
#else
#define SHARDREC_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
#define SHARDREC_BEGIN_DECL extern "C" {
#define SHARDREC_END_DECL }
#else
#define SHARDREC_BEGIN_DECL
#define SHARDREC_END_DECL
#endif

SHARDREC_BEGIN_DECL

/** Return type of every fallible call: SHARDREC_OK or one of the negative codes below. */
typedef int32_t shardrec_status_t;

/** Status codes. Each function documents the codes it returns besides SHARDREC_ERROR. */
enum shardrec_status_code {
  SHARDREC_OK = 0,             /**< Success. */
  SHARDREC_ERROR = -1,         /**< Generic failure; see shardrec_last_error(). */
  SHARDREC_EINVAL = -2,        /**< An argument is invalid (NULL, out of range, wrong size). */
  SHARDREC_EUSAGE = -3,        /**< The call is not valid in the handle's current state. */
  SHARDREC_ENOMEM = -4,        /**< Host or device memory could not be allocated. */
  SHARDREC_ECUDA = -5,         /**< A CUDA runtime or library call failed. */
  SHARDREC_EREMOTE = -6,       /**< A peer failed or a collective broke; the handle is poisoned. */
  SHARDREC_ETIMEOUT = -7,      /**< An operation did not complete within its timeout. */
  SHARDREC_EIO = -8,           /**< An I/O or socket operation failed. */
  SHARDREC_ECORRUPT = -9,      /**< Data is malformed (bad checksum, bad id, bad plan text). */
  SHARDREC_EUNSUPPORTED = -10, /**< Not supported by this build or this configuration. */
  SHARDREC_ENOTFOUND = -11,    /**< A named object (table, feature, key) does not exist. */
  SHARDREC_EINTERNAL = -12,    /**< A bug in libshardrec; please report it with the message. */
  SHARDREC_ENODEVICE = -13,    /**< A GPU was requested but no usable device or CUDA runtime. */
  /** shardrec_comm_abort() was called (from any thread) on this communicator or on one it was
   *  split from (comm.h): the call was interrupted or refused on this rank; the handle is
   *  poisoned. Peers of an aborted rank get SHARDREC_EREMOTE instead. */
  SHARDREC_EABORTED = -14
};

/** Element types of tensors and buffers (stored as int32_t in option structs). The FP8 values are
 *  table weight storage types only (shardrec_table_config_t.dtype; embedding.h, "Weight
 *  storage"), never a tensor's or a buffer's element type: a row of dim values takes 4 + dim
 *  bytes (an fp32 power-of-two scale, then one 8-bit code a value). */
typedef enum shardrec_dtype {
  SHARDREC_DTYPE_FLOAT32 = 0,
  SHARDREC_DTYPE_FLOAT16 = 1,
  SHARDREC_DTYPE_BFLOAT16 = 2,
  SHARDREC_DTYPE_FLOAT64 = 3,
  SHARDREC_DTYPE_INT32 = 4,
  SHARDREC_DTYPE_INT64 = 5,
  SHARDREC_DTYPE_UINT8 = 6,
  SHARDREC_DTYPE_FP8_E4M3 = 7, /**< OCP E4M3 ("FN": largest finite 448), per-row scale. */
  SHARDREC_DTYPE_FP8_E5M2 = 8  /**< OCP E5M2 (largest finite 57344), per-row scale. */
} shardrec_dtype_t;

/** Where a buffer lives (stored as int32_t in option structs). */
typedef enum shardrec_device_type {
  SHARDREC_DEVICE_HOST = 0, /**< Host memory; operations are synchronous. */
  SHARDREC_DEVICE_CUDA = 1  /**< CUDA device memory; operations are ordered on a stream. */
} shardrec_device_type_t;

/**
 * Bits of a dynamic table's delta flags (a uint32_t): what shardrec_embedding_dynamic_delta_ext
 * (dynamic.h) says of the delta it exports and shardrec_inference_apply_delta_ext (inference.h)
 * takes, so a service hands the exporter's flags to the apply unchanged (across a network too:
 * the values are part of the ABI).
 */
typedef enum shardrec_delta_flag {
  /** A full snapshot: the training table was replaced since the mark (a checkpoint load), so
   *  what it held at the mark is no longer known to be what the serving copy holds; the delta's
   *  rows are every row the table holds. Applied with this flag, they replace the served table's
   *  rows: every id absent from them is removed, whatever the copy held before. */
  SHARDREC_DELTA_FULL = 1
} shardrec_delta_flag_t;

/* Opaque handles. Each is created by a `_create` function and released by its `_destroy`. */
typedef struct shardrec_comm shardrec_comm_t;           /**< Communicator (comm.h). */
typedef struct shardrec_plan shardrec_plan_t;           /**< Sharding plan (plan.h). */
typedef struct shardrec_embedding shardrec_embedding_t; /**< Sharded collection (embedding.h). */
typedef struct shardrec_mesh shardrec_mesh_t;           /**< 2D replica x shard mesh (replica.h). */

/**
 * Human-readable name of a status code, e.g. "SHARDREC_ETIMEOUT".
 * @param code Any value; unknown codes give "SHARDREC_UNKNOWN".
 * @return A static string owned by the library; never NULL. Thread-safe.
 */
SHARDREC_API const char* shardrec_status_string(shardrec_status_t code);

/**
 * The message of the last failed call on the calling thread. Always well-formed UTF-8: a byte of
 * a damaged file that a message quotes and that is not part of well-formed UTF-8 appears as the
 * four characters \xNN (hex).
 * @return A string owned by the library, valid until the next libshardrec call on this thread;
 *         empty (never NULL) when the last call succeeded. Thread-safe (per-thread storage).
 */
SHARDREC_API const char* shardrec_last_error(void);

/**
 * Copies the last error message of the calling thread into a caller buffer, NUL-terminated and
 * truncated to fit; for bindings that cannot hold a borrowed pointer.
 * @param buf    [out] Destination; may be NULL only when @p buf_len is 0.
 * @param buf_len Size of @p buf in bytes.
 * @return The full message length in bytes, excluding the terminator. Thread-safe.
 */
SHARDREC_API size_t shardrec_last_error_copy(char* buf, size_t buf_len);

/**
 * Runtime version of the loaded library, encoded as major*10000 + minor*100 + patch.
 * Compare with SHARDREC_VERSION_CODE from shardrec/version.h. Thread-safe.
 */
SHARDREC_API int32_t shardrec_version(void);

/** Runtime version as "major.minor.patch"; a static string, never NULL. Thread-safe. */
SHARDREC_API const char* shardrec_version_string(void);

/** Size in bytes of one element of @p dtype, or 0 for an unknown value and for the FP8 storage
 *  types (which are no element types: their rows carry a scale). Thread-safe. */
SHARDREC_API size_t shardrec_dtype_size(int32_t dtype);

/**
 * Releases a buffer that libshardrec allocated and handed to the caller (for example plan text
 * or stats). NULL is a no-op. Never pass memory from another allocator. Thread-safe.
 */
SHARDREC_API void shardrec_free(void* ptr);

SHARDREC_END_DECL

#endif /* SHARDREC_COMMON_H_ */
