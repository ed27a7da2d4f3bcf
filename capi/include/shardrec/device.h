/**
 * @file shardrec/device.h
 * @brief GPU discovery: how many CUDA devices libshardrec can use, whether a given device is
 *        usable, and where the CUDA plugin was loaded from.
 *
 * libshardrec.so itself never links CUDA. The GPU backend lives in the plugin
 * libshardrec_cuda.so, which is loaded the first time any call asks about a GPU (these calls
 * included). The plugin is searched for, in order: the full path in the environment variable
 * SHARDREC_CUDA_PLUGIN (used alone when set); the folder that holds libshardrec.so; the
 * dynamic linker's search path (libshardrec_cuda.so.0.1: versioned like libshardrec, major.minor
 * while 0.x). A libshardrec built without CUDA tries only SHARDREC_CUDA_PLUGIN (a plugin built
 * elsewhere against the same ABI), and with it unset every GPU request is SHARDREC_EUNSUPPORTED.
 * The outcome of that first attempt, success or failure, is kept for the life of the process, so
 * setting SHARDREC_CUDA_PLUGIN only has an effect before the first GPU-related call.
 *
 * None of these calls uses a stream; all are synchronous.
 */
#ifndef SHARDREC_DEVICE_H_
#define SHARDREC_DEVICE_H_

#include "shardrec/common.h"

SHARDREC_BEGIN_DECL

/**
 * Number of CUDA devices that libshardrec can use.
 *
 * Having no GPU is not an error: when the build has no CUDA support, the plugin or the CUDA
 * runtime cannot be loaded, or the driver reports no device, the call succeeds with 0. Use
 * shardrec_device_check() to learn why a device is missing.
 *
 * @param out [out] Receives the device count (>= 0); must not be NULL.
 * @return SHARDREC_OK; SHARDREC_EINVAL when @p out is NULL.
 * Thread-safety: safe to call from any thread, concurrently.
 */
SHARDREC_API shardrec_status_t shardrec_device_count(int32_t* out);

/**
 * Checks that a device is usable, loading the CUDA plugin if needed.
 *
 * The host (SHARDREC_DEVICE_HOST) is always usable. A CUDA device needs the plugin, a working
 * CUDA driver and @p device_index below shardrec_device_count(); on failure the message
 * (shardrec_last_error()) names the device and the reason, including the CUDA error text or
 * the plugin paths that were tried.
 *
 * @param device_type  [in] A shardrec_device_type_t value.
 * @param device_index [in] CUDA device ordinal (>= 0); ignored for the host.
 * @return SHARDREC_OK when usable; SHARDREC_ENODEVICE when the device, the plugin or the CUDA
 *         runtime is missing; SHARDREC_EUNSUPPORTED when libshardrec was built without CUDA
 *         and SHARDREC_CUDA_PLUGIN is unset;
 *         SHARDREC_EINVAL for an unknown @p device_type or a negative @p device_index.
 * Thread-safety: safe to call from any thread, concurrently.
 */
SHARDREC_API shardrec_status_t shardrec_device_check(int32_t device_type, int32_t device_index);

/**
 * Absolute path of the loaded CUDA plugin, for diagnostics.
 *
 * Copies the path into @p buf, NUL-terminated and truncated to fit. Call it with @p buf NULL
 * and @p buf_len 0 to learn the length first.
 *
 * @param path_len_out [out] Receives the full path length in bytes, excluding the terminator;
 *                     may be NULL. Set to 0 on failure.
 * @param buf          [out] Destination; may be NULL only when @p buf_len is 0.
 * @param buf_len      [in] Size of @p buf in bytes.
 * @return SHARDREC_OK when the plugin is loaded and a CUDA device is usable;
 *         SHARDREC_ENODEVICE otherwise, with a message that says which files were tried and
 *         why they failed, or which plugin file was loaded and why it found no device;
 *         SHARDREC_EUNSUPPORTED when libshardrec was built without CUDA and
 *         SHARDREC_CUDA_PLUGIN is unset; SHARDREC_EINVAL when @p buf is NULL and @p buf_len
 *         is not 0.
 * Thread-safety: safe to call from any thread, concurrently.
 */
SHARDREC_API shardrec_status_t shardrec_device_plugin_path(size_t* path_len_out, char* buf,
                                                           size_t buf_len);

SHARDREC_END_DECL

#endif /* SHARDREC_DEVICE_H_ */
